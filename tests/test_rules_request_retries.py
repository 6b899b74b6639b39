"""request-retries (TD113): retried requests and failures after retries, per service, with their time cost.

Synthetic logs are written in the SDK's own formats (logs.log layout of FORMATS.md 3.5): tinker's
Stainless `_base_client` (`Retrying due to status code N`, `Retrying request to URL in S seconds`),
`lib/retry_handler.py` (`Request attempt #N failed with status N`, `Request timed out`, `Request failed with
connection error: ...`, `Retrying in S.SSs`), `lib/api_future_impl.py` (`Retrying request self.request_id=...
because of try_again`), and openai's `_base_client` INFO line of the corpus.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
from conftest import corpus_path, fixture_run

from trace_doctor.api import load_run
from trace_doctor.ingest.parsers.logs import parse_lines
from trace_doctor.model import LOG_EVENTS_SCHEMA, InputFile, RunTables
from trace_doctor.policy import Policy
from trace_doctor.rules.engine import run_rules

SESSION = "3a07bc0d-512d-5b0d-9c07-c13d5e0307ef"
HEAD = f"tinker.lib.public_interfaces.service_client:72 [INFO] ServiceClient initialized for session {SESSION}\n"
EACH_CLASS = (
    "tinker._base_client:729 [DEBUG] Retrying due to status code 429\n"
    "tinker._base_client:1086 [DEBUG] 9 retries left\n"
    "tinker._base_client:1091 [DEBUG] Retrying request to /api/v1/asample in 0.482113 seconds\n"
    "tinker.lib.retry_handler:251 [DEBUG] Request attempt #1 failed with status 503\n"
    "tinker.lib.retry_handler:218 [DEBUG] Retrying in 0.51s\n"
    "tinker.lib.retry_handler:245 [DEBUG] Request timed out\n"
    "tinker.lib.retry_handler:218 [DEBUG] Retrying in 1.03s\n"
    "tinker.lib.retry_handler:247 [DEBUG] Request failed with connection error: Connection error.\n"
    "tinker.lib.retry_handler:218 [DEBUG] Retrying in 2.11s\n"
    "tinker.lib.api_future_impl:435 [WARNING] Retrying request self.request_id='8c1e0f7a-2b3c' because of try_again\n"
)
STUCK = (
    "tinker_cookbook.rl.train:310 [INFO] Sampling batch 4\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.12/site-packages/tinker/lib/retry_handler.py", line 142, in execute\n'
    "tinker.APIConnectionError: No progress made in 7200.0s. Requests appear to be stuck.\n"
)
NON_RETRYABLE = (
    "tinker.lib.retry_handler:222 [ERROR] Request failed with non-retryable error: BadRequestError: Error code: "
    "400 - {'detail': \"Prompt length plus max_tokens exceeds the model's context window: 20847 prompt tokens + "
    '16384 max_tokens > 32768."}\n'
)
OPENAI = "openai._base_client:1621 [INFO] Retrying request to /chat/completions in 0.387222 seconds\n"


def _run(tmp_path: Path, text: str) -> RunTables:
    (tmp_path / "logs.log").write_text(text)
    return load_run(tmp_path / "logs.log")


def _outcome(run: RunTables, slugs: tuple[str, ...] = ("request-retries",), policy: Policy | None = None):
    findings, outcomes, _ = run_rules(run, select=list(slugs), policy=policy)
    return findings, {o.rule: o for o in outcomes}


def _mine(findings) -> list:
    return [f for f in findings if f.rule == "request-retries"]


def test_ingest_keeps_retry_lines_and_leaves_other_kinds_alone() -> None:
    rows, _ = parse_lines((HEAD + EACH_CLASS + NON_RETRYABLE).splitlines(), "logs.log")
    kinds = [row["kind"] for row in rows]
    assert kinds.count("request-retry") == 8  # 4 causes + 4 backoffs; `9 retries left` is not an event
    assert kinds.count("retry") == 1  # the try_again warning keeps its SDK-message kind
    assert kinds[-1] == "error"  # a non-retryable error stays an error (decoded-error's)
    backoffs = [row["_fields"] for row in rows if row["_fields"].get("retry") == "backoff"]
    assert backoffs[0] == {"retry": "backoff", "backoff_s": 0.482113, "url": "/api/v1/asample"}
    # short retry forms count only inside a log record, never as a bare print
    assert parse_lines(["Request timed out", "Retrying in 2s"], "stdout.txt")[0] == []


def test_fires_on_each_retry_class_with_backoff_but_no_invented_seconds(tmp_path: Path) -> None:
    findings, outcomes = _outcome(_run(tmp_path, HEAD + EACH_CLASS))
    assert outcomes["request-retries"].status == "fired"
    [finding] = _mine(findings)
    assert finding.severity == "info"  # 5 transient retries, none failed
    ev = finding.evidence
    assert ev["retries"] == 5 and ev["failed_after_retries"] == 0
    assert ev["classes"] == {
        "rate limit (429)": 1,
        "server error (5xx)": 1,
        "timeout": 1,
        "connection error": 1,
        "server try_again": 1,
    }
    assert ev["statuses"] == {429: 1, 503: 1}
    assert ev["time_cost"]["backoff_s"] == 4.132 and ev["time_cost"]["wall_clock_s"] is None
    assert finding.seconds_lost is None and "could not be measured" in finding.message
    assert ev["sessions"] == [SESSION] and ev["per_minute"] is None
    assert "quota" in finding.fix and "trace-doctor bundle" in finding.fix and SESSION in finding.fix


def test_failure_after_retries_is_a_warning_pointing_at_decoded_error(tmp_path: Path) -> None:
    findings, _ = _outcome(_run(tmp_path, HEAD + EACH_CLASS + STUCK), ("request-retries", "decoded-error"))
    [finding] = _mine(findings)
    assert finding.severity == "warning" and finding.title == "Tinker requests failed after retries"
    assert finding.evidence["failed_after_retries"] == 1
    assert finding.evidence["decoded_by"] == ["decoded-error:stuck-requests"]
    assert "decoded-error:stuck-requests" in {f.fingerprint for f in findings}  # the decoding stays there
    assert "trace-doctor bundle" in finding.fix


def test_a_failure_after_retries_alone_still_fires(tmp_path: Path) -> None:
    text = "tinker_cookbook.rl.train:88 [ERROR] Failed to sample after exhausting retries\n"
    [finding] = _mine(_outcome(_run(tmp_path, text))[0])
    assert finding.severity == "warning" and finding.evidence["retries"] == 0
    assert finding.evidence["decoded_by"] == ["decoded-error:retries-exhausted"]


def test_frequent_retries_are_a_warning(tmp_path: Path) -> None:
    text = (
        HEAD
        + EACH_CLASS.splitlines(keepends=True)[3] * 3
        + "".join(
            f"tinker.lib.retry_handler:251 [DEBUG] Request attempt #{n} failed with status 429\n"
            f"tinker.lib.retry_handler:218 [DEBUG] Retrying in {min(0.5 * 2**n, 10.0):.2f}s\n"
            for n in range(1, 10)
        )
    )
    [finding] = _mine(_outcome(_run(tmp_path, text))[0])
    assert finding.evidence["retries"] == 12 and finding.severity == "warning"
    relaxed = Policy.from_config(rules={"request-retries": {"frequent_retries": 20}})
    [finding] = _mine(_outcome(_run(tmp_path, text), policy=relaxed)[0])
    assert finding.severity == "info"


def test_non_retryable_errors_are_left_to_decoded_error(tmp_path: Path) -> None:
    findings, outcomes = _outcome(_run(tmp_path, HEAD + NON_RETRYABLE * 3), ("request-retries", "decoded-error"))
    assert _mine(findings) == []
    assert outcomes["request-retries"].status == "passed"
    assert "3 non-retryable error(s) are not retries" in outcomes["request-retries"].reason
    assert [f.rule for f in findings] == ["decoded-error"]
    # next to real retries, the 400 is neither counted nor cited
    [finding] = _mine(_outcome(_run(tmp_path, HEAD + EACH_CLASS + NON_RETRYABLE))[0])
    assert finding.evidence["retries"] == 5 and finding.evidence["failed_after_retries"] == 0
    assert "non-retryable" not in json.dumps(finding.evidence)


def test_third_party_retries_are_named_and_never_counted_as_tinker(tmp_path: Path) -> None:
    findings, _ = _outcome(_run(tmp_path, HEAD + OPENAI * 40 + EACH_CLASS))
    tinker, openai = sorted(_mine(findings), key=lambda f: f.fingerprint != "request-retries:tinker")
    assert tinker.evidence["retries"] == 5 and tinker.severity == "info"
    assert openai.fingerprint == "request-retries:openai" and openai.severity == "info"  # not Tinker's: info
    assert openai.evidence["retries"] == 40 and openai.evidence["urls"] == ["/chat/completions"]
    assert "not Tinker" in openai.message and "Nothing to escalate to Tinker" in openai.fix


def test_timestamps_give_per_minute_counts_and_a_measured_cost() -> None:
    start = datetime(2026, 3, 1, 12, 0, 0)
    rows = []
    for offset in (0, 1, 2, 70):  # three retries in the first minute, one later
        stamp = start + timedelta(seconds=offset)
        for kind_fields, message in (
            ({"retry": "cause", "status": 503}, "Request attempt #1 failed with status 503"),
            ({"retry": "backoff", "backoff_s": 2.0}, "Retrying in 2.00s"),
        ):
            rows.append(
                {
                    "source": "logs.log",
                    "line": len(rows) + 1,
                    "timestamp": stamp,
                    "logger": "tinker.lib.retry_handler",
                    "level": "DEBUG",
                    "kind": "request-retry",
                    "message": message,
                    "fields": json.dumps(kind_fields),
                }
            )
    run = RunTables()
    run.inputs.append(InputFile("log", "logs.log", records=len(rows)))
    run.log_events = pl.DataFrame(rows, schema=LOG_EVENTS_SCHEMA)
    [finding] = _mine(_outcome(run)[0])
    assert finding.evidence["per_minute"] == {"2026-03-01T12:00": 3, "2026-03-01T12:01": 1}
    assert finding.severity == "warning"  # 3 in one minute: a burst
    # the backoffs of 0-2 s, 1-3 s, 2-4 s overlap (4 s) and 70-72 s adds 2 s
    assert finding.seconds_lost == 6.0 and finding.evidence["time_cost"]["wall_clock_s"] == 6.0


def test_healthy_pipelined_fixture_has_no_retries() -> None:
    findings, outcomes = _outcome(load_run(fixture_run("sl_healthy_pipelined")))
    assert _mine(findings) == []
    assert outcomes["request-retries"].status in ("passed", "not_applicable")


def test_corpus_sushantmehta_judge_retries_are_openai_and_the_400s_stay_decoded_errors() -> None:
    path = corpus_path("sushantmehta-tinker-cookbook/logs")
    findings, outcomes = _outcome(load_run(path), ("request-retries", "decoded-error"))
    [finding] = _mine(findings)
    assert finding.fingerprint == "request-retries:openai" and finding.severity == "info"
    ev = finding.evidence
    assert ev["retries"] == 6 and ev["urls"] == ["/chat/completions"]
    assert [line["line"] for line in ev["lines"]] == [14, 15, 536, 537, 538, 539]
    assert ev["time_cost"]["backoff_s"] == 2.496 and finding.seconds_lost is None
    assert "judge_model=gpt-5-mini" in finding.message
    decoded = [f for f in findings if f.rule == "decoded-error"]
    assert [f.evidence["occurrences"] for f in decoded] == [8]  # the non-retryable 400s, reported once, there
