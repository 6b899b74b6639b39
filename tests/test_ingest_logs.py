"""Text logs -> log_events: cookbook records, tracebacks, console captures, corpus logs."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CORPUS, CORPUS_MISSING, corpus_path, fixture_run
from trace_doctor.ingest.parsers.logs import parse_lines, parse_log_files
from trace_doctor.model import LOG_EVENTS_SCHEMA

COOKBOOK_LOG = (
    "root:791 [INFO] Command line invocation: python -m tinker_cookbook.recipes.sl_loop log_path=/tmp/run\n"
    "tinker_cookbook.utils.ml_log:729 [INFO] Logging to: /tmp/run\n"
    "tinker.lib.public_interfaces.service_client:71 [INFO] ServiceClient initialized for session "
    "3a07bc0d-512d-5b0d-9c07-c13d5e0307ef\n"
    "tinker.lib.public_interfaces.service_client:147 [INFO] TrainingClient initialized for model "
    "3a07bc0d-512d-5b0d-9c07-c13d5e0307ef:train:0\n"
    "tinker_cookbook.utils.misc_utils:20 [INFO] Starting get_batch\n"
    "tinker_cookbook.utils.misc_utils:23 [INFO] get_batch took 12.34 seconds\n"
    "tinker_cookbook.utils.ml_log:236 [INFO] Wrote metrics to /tmp/run/metrics.jsonl\n"
    "tinker_cookbook.utils.ml_log:200 [INFO] \n"
    "\x1b[1mStep 0\x1b[0m\n"
    "│ time/total │ 12.500000 │\n"
    "tinker.lib.internal_client_holder:402 [WARNING] Session heartbeat failed for 130.5 seconds for session "
    "3a07bc0d-512d-5b0d-9c07-c13d5e0307ef. Last exception: ReadTimeout.\n"
    "Your connection may be unreliable or Tinker is down. If this persists, the session will be terminated.\n"
    "[GIL monitor] slept 3.47s instead of 2.0s (jitter: 1.47s) — likely GIL contention\n"
    "tinker_cookbook.rl.train:900 [WARNING] Batch 3: all groups failed or filtered, skipping batch\n"
    "tinker_cookbook.renderers:88 [WARNING] Renderer 'qwen3' is not recommended for model 'meta-llama/Llama-3.1-8B'. "
    "Recommended renderer(s): llama3\n"
    "tinker_cookbook.renderers:88 [WARNING] Renderer 'qwen3' is not recommended for model 'meta-llama/Llama-3.1-8B'. "
    "Recommended renderer(s): llama3\n"
    "tinker.lib.queue_state_logger:60 [WARNING] Training for 3a07bc0d:train:0 is paused. Reason: concurrent training "
    "clients rate limit hit.\n"
    "tinker.lib.retry_handler:222 [ERROR] Request failed with non-retryable error: BadRequestError: Error code: 400 - "
    "{'detail': \"Prompt length plus max_tokens exceeds the model's context window: 20847 prompt tokens + 16384 "
    'max_tokens > 32768."}\n'
    "asyncio:1879 [ERROR] Task exception was never retrieved\n"
    "future: <Task finished name='Task-76' coro=<run_eval() done, defined at /app/inspect.py:433> "
    "exception=ValueError()>\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.12/site-packages/tinker_cookbook/rl/train.py", line 10, in run\n'
    '    raise ValueError("max() iterable argument is empty")\n'
    "ValueError: max() iterable argument is empty\n"
    "tinker_cookbook.checkpoint_utils:465 [INFO] Saved checkpoints: {'state_path': "
    "'tinker://3a07bc0d-512d:train:0/weights/000010'}\n"
)


def _events(tmp_path: Path, text: str, name: str = "logs.log") -> tuple[pl.DataFrame, list]:
    path = tmp_path / name
    path.write_text(text)
    warnings: list = []
    events, _ = parse_log_files([path], warnings)
    return events, warnings


def _line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _fields(events: pl.DataFrame, kind: str) -> list[dict]:
    return [json.loads(f) for f in events.filter(pl.col("kind") == kind)["fields"]]


def test_cookbook_log_events(tmp_path: Path) -> None:
    events, warnings = _events(tmp_path, COOKBOOK_LOG)
    assert warnings == [] and dict(events.schema) == LOG_EVENTS_SCHEMA
    kinds = events["kind"].to_list()
    assert kinds.count("restart") == 1  # `Logging to:` right after the invocation is the same start
    assert _fields(events, "took") == [
        {"name": "get_batch", "phase": "start", "seconds": None},
        {"name": "get_batch", "phase": "end", "seconds": 12.34},
    ]
    heartbeat = _fields(events, "heartbeat")[0]
    assert heartbeat["secs"] == 130.5 and heartbeat["session_id"] == "3a07bc0d-512d-5b0d-9c07-c13d5e0307ef"
    assert _fields(events, "gil-monitor") == [{"actual_s": 3.47, "expected_s": 2.0, "jitter_s": 1.47}]
    assert _fields(events, "skipped-batch") == [{"batch": 3}]
    renderer = _fields(events, "renderer")
    assert len(renderer) == 1 and renderer[0]["repeats"] == 2 and renderer[0]["renderer"] == "qwen3"
    assert _fields(events, "paused")[0]["reason"] == "concurrent training clients rate limit hit"
    errors = events.filter(pl.col("kind") == "error")
    assert errors["line"].to_list() == [18, 19]
    first, second = _fields(events, "error")
    assert first["error_id"] == "prompt-too-long" and first["sdk_message"] == "non-retryable"
    assert (second["exception_type"], second["exception_line"], second["error_id"]) == ("ValueError", 24, "empty-datum")
    sessions = _fields(events, "session")
    assert {"run_id": "3a07bc0d-512d:train:0"} in sessions and any("model_id" in s for s in sessions)
    versions = _fields(events, "version")
    assert {"package": "python", "version": "3.12", "evidence": "site-packages path"} in versions
    # the metrics table inside a record is not an event of its own
    assert "Step 0" not in " ".join(events["message"])


def test_console_capture_with_ansi_levels_and_bare_traceback(tmp_path: Path) -> None:
    text = (
        "tinker_cookbook.utils.ml_log:475 [\x1b[92mINFO\x1b[0m] Logging to: logs_v2\n"
        "/venv/lib/python3.11/site-packages/tinker/lib/x.py:12: FutureWarning: DEPRECATED: "
        "TrainingClient.forward_backward_async() is deprecated\n"
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/tinker/_base_client.py", line 1578, in request\n'
        "    raise self._make_status_error_from_response(err.response) from None\n"
        "tinker.BadRequestError: Error code: 400 - {'detail': 'The version of the Tinker SDK you are using is no "
        "longer supported.'}\n"
    )
    events, _ = _events(tmp_path, text, "output.log")
    assert events["kind"].to_list() == ["restart", "sdk-warning", "version", "error"]
    error = _fields(events, "error")[0]
    assert error["error_id"] == "sdk-unsupported" and error["traceback_line"] == 3


def test_serialization_test_output_and_versions(tmp_path: Path) -> None:
    text = (
        "Python: 3.11.9\n"
        "pydantic: 2.13.0b2\n"
        "tinker: 0.38.0\n"
        "Payload: batch_size=4, seq_len=8192, total_tokens=32,768\n"
        "model_dump() took 147.231s\n"
        "FAIL: model_dump() is far too slow\n"
        "Your pydantic version (2.13.0b2) likely has a regression.\n"
    )
    events, _ = _events(tmp_path, text, "check.txt")
    versions = {(f["package"], f["version"]) for f in _fields(events, "version")}
    assert versions == {("python", "3.11.9"), ("pydantic", "2.13.0b2"), ("tinker", "0.38.0")}
    serialization = _fields(events, "serialization-test")
    assert {"model_dump_s": 147.231} in serialization and any(f.get("verdict") == "FAIL" for f in serialization)
    assert {"batch_size": 4, "seq_len": 8192, "total_tokens": 32768} in serialization


def test_requirements_and_code_diff_versions(tmp_path: Path) -> None:
    wandb = tmp_path / "wandb" / "run-1" / "files"
    wandb.mkdir(parents=True)
    (wandb / "requirements.txt").write_text("pydantic==2.13.0b2\ntinker==0.38.0\ntorch==2.10.0+cu128\n")
    (tmp_path / "code.diff").write_text(
        "### repo: /home/u/tinker-cookbook @ 9dfcc3a2cf44432d621a01005073dc6d76a1e87a\n"
        "modules: tinker_cookbook\n"
        "(no local changes)\n"
    )
    events, inputs = parse_log_files([wandb / "requirements.txt", tmp_path / "code.diff"], [])
    versions = {(f["package"], f["version"]) for f in _fields(events, "version")}
    assert {("pydantic", "2.13.0b2"), ("tinker", "0.38.0"), ("torch", "2.10.0+cu128")} <= versions
    assert ("git:/home/u/tinker-cookbook", "9dfcc3a2cf44432d621a01005073dc6d76a1e87a") in versions
    assert sorted(i.kind for i in inputs) == ["code_diff", "log"]


def test_dump_blocks_are_left_to_the_dump_parser(tmp_path: Path) -> None:
    dump = (
        "\n===== 2026-03-05 12:00:01 asyncio task dump [holder] 1 task(s) @ interval=1.0s =====\n"
        "  'Task-1': pending  <coroutine object InternalClientHolder._session_heartbeat at 0x1>\n"
        "===== 2026-03-05 12:00:01 end [holder] =====\n"
    )
    events, _ = _events(
        tmp_path,
        dump + "[GIL monitor] slept 2.60s instead of 2.0s (jitter: 0.60s) — likely GIL contention\n",
        "stdout.txt",
    )
    assert events["kind"].to_list() == ["gil-monitor"]


def test_invalid_utf8_warns_once_and_keeps_lines(tmp_path: Path) -> None:
    path = tmp_path / "logs.log"
    path.write_bytes(b"\xff\xfe garbage\n" + COOKBOOK_LOG.encode() + b"\x80\x81 more garbage\n")
    warnings: list = []
    events, inputs = parse_log_files([path], warnings)
    assert len(warnings) == 1 and warnings[0].line == 1
    assert _fields(events, "gil-monitor") and events.filter(pl.col("kind") == "error").height == 2


def test_sushantmehta_prompt_too_long_errors() -> None:
    path = corpus_path("sushantmehta-tinker-cookbook/logs/logs.log")
    warnings: list = []
    events, inputs = parse_log_files([path], warnings)
    errors = events.filter(pl.col("kind") == "error")
    assert errors["line"].to_list() == list(range(22261, 22269))
    assert {json.loads(f)["error_id"] for f in errors["fields"]} == {"prompt-too-long"}
    took = _fields(events, "took")
    assert {"name": "run_evals", "phase": "end", "seconds": 333.03} in took
    assert sum(1 for f in took if f["phase"] == "end") == sum(
        1 for line in path.read_text().splitlines() if " took " in line and "[INFO]" in line
    )
    assert inputs[0].records == _line_count(path) == 22276
    assert warnings == []


def test_astowolfo_asyncio_errors_and_sdk_rejection() -> None:
    base = "astOwOlfo-reward-hacking/tmp/tinker-runs/bash_codeforces"
    events, _ = parse_log_files([corpus_path(f"{base}/logs.log")], [])
    assert events.filter(pl.col("kind") == "restart").height == 16  # 16 `Logging to:` relaunches in one file
    errors = _fields(events, "error")
    assert {e.get("exception_type") for e in errors} >= {"AssertionError", "TypeError", "IndexError"}
    output = next((CORPUS / base / "wandb").rglob("output.log"))
    events, _ = parse_log_files([output], [])
    assert [f["error_id"] for f in _fields(events, "error")] == ["sdk-unsupported"]
    assert {"package": "python", "version": "3.13", "evidence": "site-packages path"} in _fields(events, "version")


def test_every_corpus_log_parses_without_warnings() -> None:
    if not CORPUS.exists():
        pytest.skip(CORPUS_MISSING)
    paths = sorted(CORPUS.rglob("logs.log")) + sorted(CORPUS.rglob("output.log"))
    assert len(paths) >= 10
    warnings: list = []
    events, inputs = parse_log_files(paths, warnings)
    assert warnings == []
    for info in inputs:
        assert info.records == _line_count(Path(info.path))
    # the 4 MB console capture holds `took` lines but no per-line flood of INFO events
    big = events.filter(pl.col("source").str.ends_with("output.log") & pl.col("source").str.contains("logs_v2/"))
    assert 0 < big.height < 1000 and big.filter(pl.col("kind") == "took").height > 100
    exp1 = events.filter(pl.col("source").str.contains("exp1_off_policy"))
    # 3,840 identical renderer warnings (train_on_what vs the extension property) collapse into one event
    renderer = exp1.filter(pl.col("kind") == "renderer")
    assert renderer.height == 1 and exp1.filter(pl.col("kind") == "warning").height == 0
    assert json.loads(renderer["fields"][0])["repeats"] == 3840
    assert json.loads(renderer["fields"][0])["problem"] == "extension-property"


def test_fixture_run_logs() -> None:
    run = fixture_run("sl_gil_stall")
    warnings: list = []
    events, _ = parse_log_files([run / "logs.log", run / "stdout.txt", run / "code.diff"], warnings)
    assert warnings == []
    assert events.filter(pl.col("kind") == "gil-monitor").height == 2
    assert events.filter(pl.col("kind") == "heartbeat").height == 2


@settings(max_examples=60, deadline=None)
@given(garbage=st.text(max_size=300), cut=st.integers(min_value=0, max_value=len(COOKBOOK_LOG)))
def test_mutated_logs_never_raise_and_keep_the_untouched_copy(garbage: str, cut: int) -> None:
    damaged = COOKBOOK_LOG[:cut] + garbage + "\n"
    offset = damaged.count("\n")
    rows, _ = parse_lines((damaged + COOKBOOK_LOG).split("\n"), "mutated")
    intact = [(row["line"] - offset, row["kind"]) for row in rows if row["line"] > offset]
    reference, _ = parse_lines(COOKBOOK_LOG.split("\n"), "reference")
    expected = [(row["line"], row["kind"]) for row in reference]
    # collapsible kinds may fold into an identical event of the damaged copy; everything else is kept
    assert [e for e in expected if e[1] not in ("renderer", "warning", "session", "version")] == [
        e for e in intact if e[1] not in ("renderer", "warning", "session", "version")
    ]


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_log_with_a_byte_order_mark_is_read_as_text(tmp_path: Path, codec: str) -> None:
    # Windows PowerShell's `python train.py > train.log` writes UTF-16 with a BOM: it was passed over as
    # "binary file" (a NUL every other byte), its errors and heartbeat warnings never read.
    from trace_doctor.discover import classify

    path = tmp_path / "train.log"
    bom = "\ufeff".encode(codec)
    path.write_bytes(bom + COOKBOOK_LOG.replace("\n", "\r\n").encode(codec))
    assert classify(path) == ("log", "")
    utf8 = tmp_path / "logs.log"
    utf8.write_text(COOKBOOK_LOG, encoding="utf-8")
    warnings: list = []
    events, inputs = parse_log_files([path], warnings)
    expected, _ = parse_log_files([utf8], [])
    assert warnings == [] and inputs[0].records == COOKBOOK_LOG.count("\n")
    assert events.drop("source").equals(expected.drop("source"))
    cut = tmp_path / "cut.log"
    cut.write_bytes(bom + COOKBOOK_LOG.encode(codec)[:-1])  # a file cut inside its last character
    warnings = []
    events, _ = parse_log_files([cut], warnings)
    assert len(warnings) == 1 and "UTF-16" in warnings[0].problem
    assert events.filter(pl.col("kind") == "error").height == 2


def test_utf16_json_is_passed_over_with_what_to_do(tmp_path: Path) -> None:
    from trace_doctor.discover import classify

    path = tmp_path / "run_metrics.jsonl"
    path.write_bytes('{"step": 0, "time/total": 1.0}\n'.encode("utf-16"))
    kind, reason = classify(path)
    assert kind is None and "UTF-16" in reason and "iconv" in reason


def test_a_code_diffs_lines_are_the_users_code_not_events_of_the_run(tmp_path: Path) -> None:
    # A diff that adds a kill pattern, a traceback and an error line (here: trace-doctor's own diff, read back by a
    # test whose simulated run recorded it): only the versions code.diff records are read from it.
    from trace_doctor.ingest.live_readers import LiveLog

    diff = (
        "### repo: /home/u/tinker-cookbook @ 9dfcc3a2cf44432d621a01005073dc6d76a1e87a\n"
        "modules: tinker_cookbook\n"
        "-- repo-wide (vs HEAD, staged+unstaged) --\n"
        '+    r"|\\bOOMKilled\\b|Container killed due to memory)|"\n'
        "+Killed\n"
        "+Traceback (most recent call last):\n"
        "+ValueError: Loss is NaN\n"
        "+tinker_cookbook.rl.train:300 [ERROR] Step failed: exit code 137\n"
    )
    (tmp_path / "code.diff").write_text(diff)
    events, inputs = parse_log_files([tmp_path / "code.diff"], [])
    assert events.get_column("kind").to_list() == ["version"]
    assert inputs[0].kind == "code_diff" and inputs[0].records == 8
    live = LiveLog(str(tmp_path / "code.diff"))
    live.feed(diff.encode().splitlines(keepends=True), 1)
    assert [row["kind"] for row in live.rows] == ["version"] and live.parser.read == 8
