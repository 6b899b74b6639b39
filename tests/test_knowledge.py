"""The knowledge tables: error decoder, SDK message templates, known-bad versions."""

from __future__ import annotations

import pytest

from trace_doctor.knowledge.errors import KNOWN_ERRORS, SDK_MESSAGES, decode_error, error_by_id, match_sdk_message
from trace_doctor.knowledge.versions import KNOWN_BAD_VERSIONS, bad_combinations, bad_versions, parse_version


@pytest.mark.parametrize(
    ("text", "error_id"),
    [
        # the real corpus line (sushantmehta logs.log) must decode as prompt-too-long, not as a generic 400
        (
            (
                "Request failed with non-retryable error: BadRequestError: Error code: 400 - "
                "{'detail': \"Prompt length plus max_tokens exceeds the model's context window: "
                '20847 prompt tokens + 16384 max_tokens > 32768."}'
            ),
            "prompt-too-long",
        ),
        (
            (
                "tinker.BadRequestError: Error code: 400 - {'detail': 'The version of the Tinker SDK you are using "
                "is no longer supported. Please update to the latest version.'}"
            ),
            "sdk-unsupported",
        ),
        ("ValueError: max() iterable argument is empty", "empty-datum"),
        ("tinker.APIConnectionError: No progress made in 7200.0s. Requests appear to be stuck.", "stuck-requests"),
        ("ModuleNotFoundError: No module named 'pkg_resources'", "pkg-resources-missing"),
        ("ValueError: This ProcessPoolExecutor uses the 'fork' start method", "fork-process-pool"),
        ("tinker.RateLimitError: Error code: 429 - too many requests", "rate-limited"),
        (
            "tinker.BadRequestError: Error code: 400 - {'detail': 'lora_config.rank must be a power of 2'}",
            "bad-lora-rank",
        ),
        ("tinker.APIConnectionError: Connection error.", "connection-error"),
    ],
)
def test_decode_error_picks_the_specific_entry(text: str, error_id: str) -> None:
    known = decode_error(text)
    assert known is not None and known.id == error_id
    assert known.root_cause and known.fix


def test_decode_error_ignores_ordinary_text() -> None:
    assert decode_error("Wrote metrics to /tmp/run/metrics.jsonl") is None
    assert decode_error("openai._base_client:1621 [INFO] Retrying request to /chat/completions in 0.43 seconds") is None


def test_error_ids_are_unique_and_resolvable() -> None:
    ids = [k.id for k in KNOWN_ERRORS]
    assert len(ids) == len(set(ids))
    assert all(error_by_id(i) is not None for i in ids)
    assert len({s.id for s in SDK_MESSAGES}) == len(SDK_MESSAGES)


def test_sdk_heartbeat_message_fields() -> None:
    matched = match_sdk_message(
        "Session heartbeat failed for 130.2 seconds for session 3a07bc0d-512d. "
        "Last exception: ReadTimeout('timed out')."
    )
    assert matched is not None
    template, fields = matched
    assert template.kind == "heartbeat"
    assert fields["secs"] == "130.2" and fields["session_id"] == "3a07bc0d-512d"


def test_sdk_paused_message_old_and_new_wording() -> None:
    new = match_sdk_message(
        "Training for model-1:train:0 is paused. Reason: concurrent training clients rate limit hit."
    )
    old = match_sdk_message(
        "Training is paused for model-1:train:0. Reason: Tinker backend is running short on capacity, please wait"
    )
    assert (
        new is not None and new[0].kind == "paused" and new[1]["reason"] == "concurrent training clients rate limit hit"
    )
    assert old is not None and old[0].id == "training-paused"


def test_pydantic_betas_are_bad_and_stable_releases_are_not() -> None:
    assert "pydantic-2.13-beta" in {r.id for r in bad_versions("pydantic", "2.13.0b2")}
    assert bad_versions("pydantic", "2.12.5") == []
    assert bad_versions("pydantic", "2.13.0") == []


@pytest.mark.parametrize(
    ("package", "version", "expected"),
    [
        ("transformers", "5.3.0", "transformers-5.3.0"),
        ("transformers", "5.5.2", "transformers-kimi-regression"),
        ("transformers", "4.57.6", "transformers-pre-5-vl"),
        ("litellm", "1.82.8", "litellm-compromised"),
        ("python", "3.14.0", "python-3.14"),
        ("tinker", "0.20.1", "tinker-upgrade-available"),
        ("tinker", "0.2.2", "tinker-no-session"),
        ("torch", "2.11.0.dev20260101", "torch-pre-release"),
    ],
)
def test_known_bad_versions(package: str, version: str, expected: str) -> None:
    assert expected in {r.id for r in bad_versions(package, version)}


def test_good_versions_and_garbage_match_nothing() -> None:
    assert bad_versions("transformers", "5.5.4") == []
    assert bad_versions("tinker", "0.38.0") == []
    assert bad_versions("pydantic", "not-a-version") == []
    assert parse_version("2.4.0+cu121") is not None


def test_combination_needs_every_member() -> None:
    hazard = {"tinker_cookbook": "0.5.2", "tinker": "0.38.0", "python": "3.11.9"}
    assert [c.id for c in bad_combinations(hazard)] == ["cookbook-0.5-tinker-0.38-py311"]
    assert bad_combinations({**hazard, "python": "3.12.1"}) == []
    assert bad_combinations({"tinker": "0.38.0", "python": "3.11.9"}) == []


def test_every_record_is_complete() -> None:
    for record in KNOWN_BAD_VERSIONS:
        assert record.package and record.specifier and record.why and record.fix
