"""The debug guide's own printouts (FORMATS.md 5.5) as evidence: parsed, then judged by the rules.

The guide asks users to run snippets and read what they print — the environment check, the smoke
test, the network round trip, submit/wait timings around calls, a retry loop's lines, httpx's
response lines. Captured to a file, each is classified with its numbers and feeds a rule:
network-latency (a slow round trip), decoded-error (which smoke-test step failed), request-retries.
"""

from __future__ import annotations

import pytest

from trace_doctor.api import analyze, load_run
from trace_doctor.ingest.parsers.logs import parse_lines
from trace_doctor.knowledge.errors import decode_error

TINKER_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod/api/v1"


def events(text: str) -> list[tuple[str, dict]]:
    rows, _ = parse_lines(text.strip("\n").splitlines(), "stdout.txt")
    return [(row["kind"], row["_fields"]) for row in rows]


def analysed(tmp_path, text: str):
    path = tmp_path / "stdout.txt"
    path.write_text(text)
    return analyze(load_run(path))


def test_without_a_round_trip_the_rule_says_what_it_needs(tmp_path):
    result = analysed(tmp_path, "submit: 0.02s, wait: 41.30s\n")
    (outcome,) = [o for o in result.outcomes if o.rule == "network-latency"]
    assert outcome.status == "not_applicable" and "API round-trip" in outcome.reason


def of_rule(result, rule):
    return [f for f in result.findings if f.rule == rule]


def test_each_printout_is_an_event_with_its_numbers():
    found = events(
        """
API reachable (2.31s), 42 models available
Training client created: TrainingClientInfo(model_id='abc')
API round-trip: 3.80s
submit: 0.02s, wait: 41.30s
API unreachable: APIConnectionError: Connection error.
Training client failed: RateLimitError: Error code: 429
"""
    )
    assert found == [
        ("smoke-test", {"step": 1, "ok": True, "seconds": 2.31, "models": 42}),
        ("smoke-test", {"step": 2, "ok": True, "info": "TrainingClientInfo(model_id='abc')"}),
        ("round-trip", {"seconds": 3.8, "check": "network"}),
        ("call-timing", {"submit_s": 0.02, "wait_s": 41.3}),
        (
            "smoke-test",
            {
                "step": 1,
                "ok": False,
                "error_type": "APIConnectionError",
                "error_message": "Connection error.",
                "error_id": "smoke-api-unreachable",
            },
        ),
        (
            "smoke-test",
            {
                "step": 2,
                "ok": False,
                "error_type": "RateLimitError",
                "error_message": "Error code: 429",
                "error_id": "smoke-client-failed",
                "exception_error_id": "rate-limited",
            },
        ),
    ]


def test_environment_check_gives_versions_printed_or_logged():
    found = events(
        """
Python: 3.14.0 (main, Oct  7 2025, 09:34:52) [Clang 17.0.0]
tinker SDK: 0.38.0
__main__:12 [INFO] pydantic: 2.13.0b2
"""
    )
    assert [(f["package"], f["version"]) for k, f in found if k == "version"] == [
        ("python", "3.14.0"),
        ("tinker", "0.38.0"),
        ("pydantic", "2.13.0b2"),
    ]


def test_http_status_lines_and_a_users_retry_loop_are_retries(tmp_path):
    text = f"""
httpx:1740 [INFO] HTTP Request: POST {TINKER_URL}/asample "HTTP/1.1 429 Too Many Requests"
httpx:1740 [INFO] HTTP Request: POST {TINKER_URL}/retrieve_future "HTTP/1.1 408 Request Timeout"
httpx:1740 [INFO] HTTP Request: POST {TINKER_URL}/forward_backward "HTTP/1.1 200 OK"
httpx:1740 [INFO] HTTP Request: POST {TINKER_URL}/forward_backward "HTTP/1.1 503 Service Unavailable"
Timeout on attempt 1/3, retrying...
Timeout on attempt 2/3, retrying...
Failed after 3 attempts due to timeout
"""
    kinds = [kind for kind, _ in events(text)]
    # 408 is the long poll's "not ready yet" and 200 is success: neither is a retry.
    assert kinds == ["request-retry", "request-retry", "request-retry", "request-retry", "error"]
    (retries,) = of_rule(analysed(tmp_path, text), "request-retries")
    assert retries.evidence["service"] == "Tinker"
    assert retries.evidence["retries"] == 4
    assert retries.evidence["statuses"] == {429: 1, 503: 1}
    assert retries.evidence["classes"]["timeout"] == 2
    assert retries.evidence["failed_after_retries"] == 1 and retries.severity == "warning"


def test_httpx_line_to_another_host_is_not_a_tinker_retry(tmp_path):
    url = "https://api.openai.com/v1/chat/completions"
    text = f'httpx:1740 [INFO] HTTP Request: POST {url} "HTTP/1.1 429 Too Many Requests"\n'
    (retries,) = of_rule(analysed(tmp_path, text), "request-retries")
    assert retries.severity == "info" and retries.evidence["service"] != "Tinker"


def test_slow_round_trip_is_the_network(tmp_path):
    text = "API reachable (2.31s), 42 models available\nAPI round-trip: 3.80s\nsubmit: 0.02s, wait: 41.30s\n"
    (network,) = of_rule(analysed(tmp_path, text), "network-latency")
    assert network.code == "TD116" and network.evidence["slowest_s"] == 3.8
    assert network.evidence["slow_count"] == 2
    assert network.seconds_lost == pytest.approx(41.3)


def test_fast_round_trip_clears_the_network(tmp_path):
    result = analysed(tmp_path, "API round-trip: 0.42s\nsubmit: 0.02s, wait: 41.30s\n")
    assert not of_rule(result, "network-latency")
    (outcome,) = [o for o in result.outcomes if o.rule == "network-latency"]
    assert outcome.status == "passed"
    assert "rules the network out" in outcome.reason and "service's time" in outcome.reason


def test_a_high_submit_is_not_a_network_wait(tmp_path):
    text = "API round-trip: 3.10s\nsubmit: 6.50s, wait: 8.00s\n"
    (network,) = of_rule(analysed(tmp_path, text), "network-latency")
    assert network.evidence["network_waits"] == [] and network.seconds_lost is None


@pytest.mark.parametrize(
    ("line", "error_id"),
    [
        ("API unreachable: APIConnectionError: Connection error.", "smoke-api-unreachable"),
        ("Training client failed: BadRequestError: Error code: 400", "smoke-client-failed"),
        (
            "tinker._exceptions.TinkerError: The api_key client option must be set either by passing api_key to "
            "the client or by setting the TINKER_API_KEY environment variable",
            "api-key-missing",
        ),
        (
            'BadRequestError: Error code: 400 - {"detail": "base_model Foo/Bar-7B is not supported"}',
            "model-not-supported",
        ),
        ("BadRequestError: Error code: 400 - batch too large: 600000 tokens", "batch-too-large"),
        ("APIStatusError: Error code: 413 - Payload Too Large", "batch-too-large"),
        ("OSError: Can't load tokenizer for 'meta-llama/Llama-3.1-8B'.", "tokenizer-error"),
        ("Failed after 3 attempts due to timeout", "retries-exhausted"),
    ],
)
def test_guide_error_reference_is_decoded_with_cause_and_fix(line, error_id):
    known = decode_error(line)
    assert known is not None and known.id == error_id
    assert known.root_cause and known.fix


def test_which_smoke_step_failed_is_the_finding(tmp_path):
    result = analysed(
        tmp_path,
        "API reachable (0.31s), 42 models available\nTraining client failed: APITimeoutError: Request timed out.\n",
    )
    decoded = {f.evidence["error_id"]: f for f in of_rule(result, "decoded-error")}
    assert "smoke-client-failed" in decoded and "smoke-api-unreachable" not in decoded
    assert "capacity" in decoded["smoke-client-failed"].message


def test_high_submits_in_the_printed_timings_are_client_side(tmp_path):
    text = "submit: 2.50s, wait: 0.40s\nsubmit: 2.61s, wait: 0.35s\nsubmit: 2.48s, wait: 0.41s\n"
    result = analysed(tmp_path, text)
    (client,) = of_rule(result, "serialization-stall")
    assert client.fingerprint == "serialization-stall:printed-timings"
    assert client.evidence["slow_submits"] == 3 and client.seconds_lost == pytest.approx(7.59)
    assert not of_rule(result, "network-latency")


def test_fast_submits_with_long_waits_are_not_client_side(tmp_path):
    text = "submit: 0.02s, wait: 41.30s\nsubmit: 0.01s, wait: 38.00s\nsubmit: 0.02s, wait: 40.10s\n"
    assert not of_rule(analysed(tmp_path, text), "serialization-stall")


def test_long_waits_behind_fast_submits_with_a_fast_round_trip_are_the_services(tmp_path):
    text = "API round-trip: 0.42s\nsubmit: 0.02s, wait: 41.30s\nsubmit: 0.01s, wait: 38.00s\n"
    result = analysed(tmp_path, text)
    (service,) = of_rule(result, "server-side-wait")
    assert service.fingerprint == "server-side-wait:printed-timings" and service.severity == "info"
    assert service.evidence["wait_s"] == pytest.approx(79.3)
    assert not of_rule(result, "network-latency") and not of_rule(result, "serialization-stall")


def test_long_waits_with_a_slow_round_trip_are_the_networks_not_the_services(tmp_path):
    result = analysed(tmp_path, "API round-trip: 3.80s\nsubmit: 0.02s, wait: 41.30s\n")
    assert of_rule(result, "network-latency") and not of_rule(result, "server-side-wait")
