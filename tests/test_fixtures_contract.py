"""Contract: the installed cookbook trace writer still produces what the span parser expects,
and every committed fixture run has the files the tests and rules rely on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "fixtures" / "runs"

# Runs in a fresh interpreter: the trace collector is a process-wide global with an atexit hook,
# and trace_init() imports `tinker`, which is replaced here by a minimal stand-in.
_WRITER_SCRIPT = textwrap.dedent(
    """
    import asyncio, concurrent.futures, sys, threading, types
    from pathlib import Path

    out = Path(sys.argv[1])
    sdk_loop = asyncio.new_event_loop()
    threading.Thread(target=sdk_loop.run_forever, daemon=True).start()

    class APIFuture:
        def __init__(self, cf): self._cf = cf
        def future(self): return self._cf
        def __await__(self): return asyncio.wrap_future(self._cf).__await__()

    async def _later(value):
        await asyncio.sleep(0.02)
        return value

    class TrainingClient:
        def forward_backward(self, data, loss_fn="cross_entropy"):
            return APIFuture(asyncio.run_coroutine_threadsafe(_later("fb"), sdk_loop))
        def optim_step(self, params):
            return APIFuture(asyncio.run_coroutine_threadsafe(_later("opt"), sdk_loop))

    class SamplingClient:
        def sample(self, prompt, num_samples=1):
            return APIFuture(asyncio.run_coroutine_threadsafe(_later("s"), sdk_loop))

    tinker = types.ModuleType("tinker")
    tinker.TrainingClient, tinker.SamplingClient = TrainingClient, SamplingClient
    sys.modules["tinker"] = tinker

    from tinker_cookbook.utils import trace

    @trace.scope
    async def train_step(tc, step):
        trace.update_scope_context({"step": step})
        fb = tc.forward_backward([1, 2, 3])
        opt = tc.optim_step(None)
        await fb
        await opt

    async def rollout(sc):
        async with trace.scope_span("policy_sample"):
            await sc.sample("p")

    async def main():
        asyncio.current_task().set_name("main")
        trace.trace_init(output_file=str(out / "trace_events.jsonl"))
        tc, sc = TrainingClient(), SamplingClient()
        for step in range(3):
            with trace.trace_iteration(step=step) as window:
                async with trace.scope_span("sampling"):
                    await asyncio.gather(*[rollout(sc) for _ in range(2)])
                await train_step(tc, step)
            window.write_spans_jsonl(out / "timing_spans.jsonl", step=step)
            print(json.dumps(window.get_timing_metrics()))
        # Keep events flowing past the flusher's 1 s window so none are dropped at shutdown.
        await asyncio.sleep(0.05)
        trace.trace_shutdown()

    import json
    asyncio.run(main())
    """
)


@pytest.fixture(scope="module")
def writer_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip(
        "tinker_cookbook.utils.trace",
        reason="tinker-cookbook is not installed (make test installs it with --no-deps tinker-cookbook==0.6.1)",
    )
    out = tmp_path_factory.mktemp("writer")
    proc = subprocess.run([sys.executable, "-c", _WRITER_SCRIPT, str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (out / "timing_metrics.jsonl").write_text(proc.stdout)
    return out


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "trace_events.jsonl").read_text().splitlines() if line.strip()]


def test_trace_line_keys_and_order(writer_output: Path) -> None:
    events = _events(writer_output)
    assert events, "the writer produced no events"
    for e in events:
        if e["ph"] in ("B", "E"):
            assert list(e) == ["name", "ph", "pid", "tid", "ts", "args", "cat"]
            assert e["cat"] == "async"
            assert isinstance(e["ts"], float) and e["ts"] > 0
            assert {"track", "thread"} <= set(e["args"])
        else:
            assert e["ph"] == "M"
            assert list(e) == ["name", "ph", "pid", "tid", "ts", "args"]
            assert e["ts"] == 0
            assert e["name"] in ("thread_name", "process_name")
            assert set(e["args"]) == {"name"}


def test_begin_end_pair_per_pid_tid_track(writer_output: Path) -> None:
    open_spans: dict[tuple, list[str]] = defaultdict(list)
    for e in _events(writer_output):
        if e["ph"] == "M":
            continue
        key = (e["pid"], e["tid"], e["args"]["track"])
        if e["ph"] == "B":
            open_spans[key].append(e["name"])
        else:
            assert open_spans[key], f"E without B: {e}"
            assert open_spans[key].pop() == e["name"]
    assert not any(open_spans.values()), f"unclosed spans: {dict(open_spans)}"


def test_step_attribute_only_on_end_events(writer_output: Path) -> None:
    events = _events(writer_output)
    assert all("step" not in e["args"] for e in events if e["ph"] == "B")
    steps = [e["args"]["step"] for e in events if e["ph"] == "E" and e["name"] == "train_step"]
    assert steps == [0, 1, 2]


def test_fake_pids_and_completion_tracks(writer_output: Path) -> None:
    events = _events(writer_output)
    assert min(e["pid"] for e in events) == 0
    samples = [e for e in events if e["name"] == "sample" and e["ph"] in ("B", "E")]
    assert samples, "0.6.1 times SDK `sample` until its future completes"
    for e in samples:
        # 0.6.1: a private track per completion-timed call
        assert e["tid"] >= 1_000_000
        assert e["args"]["track"].endswith(f":sample:{e['tid']}")


def test_timing_spans_lines(writer_output: Path) -> None:
    lines = [json.loads(x) for x in (writer_output / "timing_spans.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2]
    for line in lines:
        assert list(line) == ["step", "spans"]
        for span in line["spans"]:
            assert list(span) == ["name", "duration", "wall_start", "wall_end"]
            assert span["duration"] >= 0
        assert min(s["wall_start"] for s in line["spans"]) == 0
        names = {s["name"] for s in line["spans"]}
        assert {"sampling", "policy_sample", "sample", "train_step", "forward_backward", "optim_step"} <= names


def test_timing_metrics_aggregation(writer_output: Path) -> None:
    rows = [json.loads(x) for x in (writer_output / "timing_metrics.jsonl").read_text().splitlines()]
    for row in rows:
        assert "time/total" in row
        assert row["time/policy_sample:count"] == 2
        assert "time/train_step" in row and "time/train_step:count" not in row


SCENARIOS = sorted(p for p in RUNS.iterdir() if p.is_dir()) if RUNS.exists() else []


@pytest.mark.parametrize("run", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_committed_scenario_has_core_files(run: Path) -> None:
    for name in ("metrics.jsonl", "config.json", "EXPECTED.json"):
        assert (run / name).is_file(), f"{run.name} lacks {name}"
    expected = json.loads((run / "EXPECTED.json").read_text())
    assert set(expected) >= {"must_fire", "must_not_fire"}
    assert not set(expected["must_fire"]) & set(expected["must_not_fire"])
    config = json.loads((run / "config.json").read_text())
    assert config["enable_trace"] is True
    assert {"model_name", "renderer_name", "lora_rank"} <= set(config)


def test_there_are_committed_scenarios() -> None:
    assert len(SCENARIOS) >= 12


def test_sample_run_matches_demo() -> None:
    sample = REPO / "trace_doctor" / "sample_run"
    demo = RUNS / "demo"
    assert sample.is_dir() and demo.is_dir()
    for f in demo.iterdir():
        if f.name in ("EXPECTED.json", "generation_stats.json"):
            assert not (sample / f.name).exists(), f"fixture bookkeeping {f.name} must not ship in the sample run"
            continue
        assert (sample / f.name).read_bytes() == f.read_bytes(), f.name
    assert sum(f.stat().st_size for f in sample.rglob("*") if f.is_file()) < 1_500_000
