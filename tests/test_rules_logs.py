"""heartbeat-stall (TD106), decoded-error (TD302), known-bad-dependency (TD301) on logs and versions."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from trace_doctor.api import load_run
from trace_doctor.derive.log_signals import heartbeat_lines
from trace_doctor.model import LOG_EVENTS_SCHEMA, InputFile, RunTables
from trace_doctor.rules.checks.heartbeat_stall import heartbeat_episodes
from trace_doctor.rules.engine import run_rules

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "runs"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason="../shared/corpus is absent (real public run artifacts)")
needs_fixtures = pytest.mark.skipif(not (RUNS / "demo").exists(), reason="fixtures/runs not generated")


def outcome(run: RunTables, slug: str):
    findings, outcomes, _ = run_rules(run, select=[slug])
    return findings, outcomes[0]


def events(*rows: tuple) -> RunTables:
    """A run whose log_events are (line, level, kind, message, fields) rows of logs.log."""
    run = RunTables()
    run.inputs.append(InputFile("log", "logs.log", records=len(rows)))
    run.log_events = pl.DataFrame(
        [
            {
                "source": "logs.log",
                "line": line,
                "timestamp": None,
                "logger": "tinker",
                "level": level,
                "kind": kind,
                "message": message,
                "fields": json.dumps(fields),
            }
            for line, level, kind, message, fields in rows
        ],
        schema=LOG_EVENTS_SCHEMA,
    )
    return run


HB = "Session heartbeat failed for {s} seconds for session {id}. Last exception: APITimeoutError: Request timed out.."


# --- heartbeat-stall ------------------------------------------------------------------------


def test_repeated_warnings_of_one_outage_count_once():
    run = events(
        (10, "WARNING", "heartbeat", HB.format(s=121.0, id="s-1"), {}),
        (20, "WARNING", "heartbeat", HB.format(s=131.5, id="s-1"), {}),
        (30, "WARNING", "heartbeat", HB.format(s=141.9, id="s-1"), {}),
        (90, "WARNING", "heartbeat", HB.format(s=125.0, id="s-1"), {}),
    )
    episodes = heartbeat_episodes(heartbeat_lines(run.log_events))
    assert [[line.line for line in ep] for ep in episodes] == [[10, 20, 30], [90]]
    (finding,), result = outcome(run, "heartbeat-stall")
    assert result.status == "fired"
    assert finding.seconds_lost == pytest.approx(141.9 + 125.0)
    assert [o["first_line"] for o in finding.evidence["outages"]] == [10, 90]
    assert finding.evidence["lines"][0] == {"file": "logs.log", "line": 10, "text": HB.format(s=121.0, id="s-1")}


def test_stuck_requests_and_pauses_are_separate_findings():
    run = events(
        (
            5,
            "WARNING",
            "paused",
            "Training for model-1 is paused. Reason: concurrent training clients rate limit hit.",
            {},
        ),
        (9, None, "error", "No progress made in 7200.0s. Requests appear to be stuck.", {}),
    )
    findings, _ = outcome(run, "heartbeat-stall")
    by_print = {f.fingerprint: f for f in findings}
    assert by_print["heartbeat-stall:stuck"].severity == "error"
    assert by_print["heartbeat-stall:stuck"].seconds_lost == 7200.0
    assert "concurrent training clients rate limit hit" in by_print["heartbeat-stall:paused"].evidence["reasons"]


def test_heartbeat_stall_passes_on_quiet_logs_and_abstains_without_logs():
    _, result = outcome(events((1, "INFO", "took", "train took 3.2 seconds", {})), "heartbeat-stall")
    assert result.status == "passed"
    _, result = outcome(RunTables(), "heartbeat-stall")
    assert result.status == "not_applicable" and "logs.log" in result.reason


@needs_fixtures
def test_heartbeat_fixture_lines_are_cited():
    (finding,), _ = outcome(load_run(RUNS / "sl_gil_stall"), "heartbeat-stall")
    assert [line["line"] for line in finding.evidence["lines"]] == [58, 109]
    assert all(line["file"].endswith("logs.log") for line in finding.evidence["lines"])


# --- decoded-error --------------------------------------------------------------------------


def test_known_errors_one_finding_each_with_severity_and_fix():
    run = events(
        (
            3,
            "ERROR",
            "error",
            (
                "Request failed with non-retryable error: BadRequestError: Prompt length plus max_tokens exceeds the "
                "model's context window: 30000 + 4096 > 32768"
            ),
            {"error_id": "prompt-too-long"},
        ),
        (
            8,
            "ERROR",
            "error",
            (
                "Request failed with non-retryable error: BadRequestError: Prompt length plus max_tokens exceeds the "
                "model's context window: 31000 + 4096 > 32768"
            ),
            {"error_id": "prompt-too-long"},
        ),
        (
            12,
            "WARNING",
            "sdk-warning",
            "Synchronous method 'TrainingClient.forward_backward()' called from async context.",
            {},
        ),
    )
    findings, _ = outcome(run, "decoded-error")
    assert [f.fingerprint for f in findings] == ["decoded-error:prompt-too-long", "decoded-error:sync-from-async"]
    prompt, sync = findings
    assert prompt.severity == "error" and sync.severity == "warning"
    assert prompt.evidence["files"] == [{"file": "logs.log", "count": 2, "first_line": 3, "last_line": 8}]
    assert "max_tokens" in prompt.fix


def test_heartbeat_warnings_are_not_decoded_as_errors():
    run = events((58, "WARNING", "heartbeat", HB.format(s=3.3, id="s"), {}))
    _, result = outcome(run, "decoded-error")
    assert result.status == "passed"


@needs_corpus
def test_sushantmehta_prompt_too_long_eight_times_with_line_numbers():
    findings, _ = outcome(load_run(CORPUS / "sushantmehta-tinker-cookbook" / "logs"), "decoded-error")
    (finding,) = findings
    assert finding.fingerprint == "decoded-error:prompt-too-long"
    assert finding.evidence["occurrences"] == 8
    (where,) = finding.evidence["files"]
    assert where["file"].endswith("logs/logs.log")
    assert (where["first_line"], where["last_line"]) == (22261, 22268)
    assert "20847 prompt tokens + 16384 max_tokens > 32768" in finding.message


@needs_corpus
def test_astowolfo_asyncio_errors_are_grouped_not_guessed():
    run = load_run(CORPUS / "astOwOlfo-reward-hacking" / "tmp" / "tinker-runs" / "bash_codeforces")
    findings, result = outcome(run, "decoded-error")
    assert result.status == "fired"
    prints = [f.fingerprint for f in findings]
    # The W&B console capture holds the first launch's `no longer supported` rejection.
    assert "decoded-error:sdk-unsupported" in prints
    unknown = next(f for f in findings if f.fingerprint == "decoded-error:unrecognised")
    assert unknown.severity == "info"
    groups = {g["signature"]: g for g in unknown.evidence["errors"]}
    assert groups["Task exception was never retrieved"]["count"] == 7
    assert groups["unhandled exception during asyncio.run() shutdown"]["count"] == 5
    assert any(
        "TypeError: 'Score' object is not subscriptable" == e
        for e in groups["Task exception was never retrieved"]["exceptions"]
    )


# --- known-bad-dependency -------------------------------------------------------------------


def versions(*pairs: tuple[str, str]) -> RunTables:
    return events(
        *[
            (i + 1, None, "version", f"{p}: {v}", {"package": p, "version": v, "evidence": "version line"})
            for i, (p, v) in enumerate(pairs)
        ]
    )


def test_pydantic_beta_and_compromised_litellm_fire_with_their_lines():
    findings, _ = outcome(
        versions(("pydantic", "2.13.0b2"), ("litellm", "1.82.7"), ("numpy", "2.1.0")), "known-bad-dependency"
    )
    prints = {f.fingerprint: f for f in findings}
    assert prints["known-bad-dependency:pydantic-2.13-beta"].severity == "error"
    assert prints["known-bad-dependency:litellm-compromised"].evidence["line"]["line"] == 2
    assert not any("numpy" in p for p in prints)


def test_transformers_ranges():
    for version, record in (
        ("5.3.0", "transformers-5.3.0"),
        ("5.5.2", "transformers-kimi-regression"),
        ("4.57.6", "transformers-pre-5-vl"),
    ):
        findings, _ = outcome(versions(("transformers", version)), "known-bad-dependency")
        assert f"known-bad-dependency:{record}" in [f.fingerprint for f in findings], version
    _, result = outcome(versions(("transformers", "5.5.4")), "known-bad-dependency")
    assert result.status == "passed"


def test_combination_hazard_from_versions_and_from_metrics():
    findings, _ = outcome(
        versions(("tinker-cookbook", "0.5.2"), ("tinker", "0.38.0"), ("python", "3.11")), "known-bad-dependency"
    )
    assert "known-bad-dependency:cookbook-0.5-tinker-0.38-py311" in [f.fingerprint for f in findings]

    run = RunTables()
    run.steps = pl.DataFrame(
        {"step": list(range(6)), "time/sample_async:mean": [0.0002] * 6, "time/policy_sample:mean": [9.5] * 6}
    )
    (trap,), result = outcome(run, "known-bad-dependency")
    assert trap.fingerprint.endswith("py311-spans") and trap.evidence["steps"] == 6


def test_not_applicable_without_versions_says_where_they_come_from():
    _, result = outcome(events((1, "INFO", "took", "x took 1 seconds", {})), "known-bad-dependency")
    assert result.status == "not_applicable" and "requirements.txt" in result.reason


@needs_corpus
def test_astowolfo_python_313_is_checked_and_passes():
    run = load_run(CORPUS / "astOwOlfo-reward-hacking" / "tmp" / "tinker-runs" / "bash_codeforces")
    _, result = outcome(run, "known-bad-dependency")
    assert result.status == "passed" and "python 3.13" in result.reason


@needs_fixtures
@pytest.mark.parametrize("slug", ["heartbeat-stall", "decoded-error", "known-bad-dependency"])
@pytest.mark.parametrize("scenario", sorted(p.name for p in RUNS.iterdir()) if RUNS.exists() else [])
def test_fixture_expectations(scenario, slug):
    expected = json.loads((RUNS / scenario / "EXPECTED.json").read_text())
    _, result = outcome(load_run(RUNS / scenario), slug)
    assert result.status != "error", result.reason
    if slug in expected["must_fire"]:
        assert result.status == "fired"
    if slug in expected["must_not_fire"]:
        assert result.status != "fired", result.reason
