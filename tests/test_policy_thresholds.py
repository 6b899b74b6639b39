"""Every threshold is read by its rule: a knob that changes nothing cannot ship (issue 11).

PROBES names, for every field of every rule's policy class and of the shared policy, a realistic run
and a value inside the field's allowed range that changes the outcome of the rule that owns it (for a
shared knob: of a rule that reads it). The tests prove that

- every threshold has a probe (a new threshold without one fails),
- each override (checked against the field's range by Policy.from_config) changes what its rule
  decides: its status or its findings, not merely an evidence field echoing the value,
- a rule's threshold changes no other rule's outcome.

Runs are the committed fixtures where one shows the effect; otherwise a small synthetic run built
here, in the style of the rule tests (tests/test_rules_*.py).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import ROOT, fixture_run
from legacy_sft_replay import replay_rows
from rule_helpers import run_from_rows

from trace_doctor.api import analyze, load_run
from trace_doctor.model import (
    FRAMES_SCHEMA,
    LOG_EVENTS_SCHEMA,
    PROFILES_SCHEMA,
    SPANS_SCHEMA,
    TASK_SNAPSHOTS_SCHEMA,
    RunTables,
)
from trace_doctor.policy import Policy, SharedPolicy, rule_policies
from trace_doctor.rules.engine import run_rules

SHARED = "shared"  # pseudo-slug of the SharedPolicy knobs in PROBES

# --- synthetic runs ---------------------------------------------------------------------------


def _span(name: str, start_s: float, dur_s: float, *, track: str = "main", tid: int = 1, step: int | None = None):
    return {
        "name": name,
        "pid": 0,
        "tid": tid,
        "thread": "MainThread",
        "track": track,
        "start_us": start_s * 1e6,
        "end_us": (start_s + dur_s) * 1e6,
        "dur_us": dur_s * 1e6,
        "depth": 0 if name == "main" else 1,
        "step": step,
        "segment": 0,
        "closed": True,
        "args": "{}",
    }


def _traced(spans: list[dict]) -> RunTables:
    run = RunTables()
    run.spans = pl.DataFrame(spans, schema=SPANS_SCHEMA)
    return run


def _fb_optim_loop(step_s: float, waits: list[float]) -> RunTables:
    """A training loop's trace: each step submits forward_backward, then optim_step `waits[i]` s after it."""
    spans = [_span("main", 0.0, step_s * len(waits))]
    for i, wait in enumerate(waits):
        start = i * step_s
        spans.append(_span("forward_backward_async", start, 0.002, step=i))
        spans.append(_span("optim_step_async", start + 0.002 + wait, 0.002, step=i))
    return _traced(spans)


@cache
def partly_sequential_loop() -> RunTables:
    """10 steps of 1 s; on 4 of them optim_step waited 0.5 s for the fb result (40% of steps, 2 s lost)."""
    return _fb_optim_loop(1.0, [0.5] * 4 + [0.005] * 6)


@cache
def long_loop_short_waits() -> RunTables:
    """40 steps of 5 s, every optim_step 50 ms after its fb: 2 s lost, 1% of the 200 s run."""
    return _fb_optim_loop(5.0, [0.05] * 40)


@cache
def short_loop_short_waits() -> RunTables:
    """10 steps of 0.4 s, every optim_step 50 ms after its fb: 0.5 s lost, 12.5% of the 4 s run."""
    return _fb_optim_loop(0.4, [0.05] * 10)


@cache
def submit_blocked_while_sampling() -> RunTables:
    """Sample round trips of 1 s; one stretched to 2.5 s while a forward_backward submit took 1.2 s."""
    spans = [_span("main", 0.0, 24.0)]
    for i in range(8):
        start = 3.0 * i
        spans.append(_span("sample_async", start, 2.5 if i == 4 else 1.0, track="sampler", tid=2, step=i))
        blocked = 1.2 if i == 4 else 0.002
        spans.append(_span("forward_backward_async", start + 0.5, blocked, step=i))
        spans.append(_span("optim_step_async", start + 0.5 + blocked, 0.002, step=i))
    return _traced(spans)


def _log_events(*messages: str) -> pl.DataFrame:
    rows = [
        {
            "source": "stdout.txt",
            "line": line,
            "timestamp": None,
            "logger": None,
            "level": None,
            "kind": "gil-monitor",
            "message": message,
            "fields": "{}",
        }
        for line, message in enumerate(messages, start=1)
    ]
    return pl.DataFrame(rows, schema=LOG_EVENTS_SCHEMA)


@cache
def guide_printouts() -> RunTables:
    """The debug guide's network check (2.5 s round trip) and two timed calls: a 6 s wait behind a prompt
    submit, and a 9 s wait behind a 0.8 s submit."""
    from trace_doctor.ingest.parsers.logs import log_events_table, parse_lines

    lines = ["API round-trip: 2.50s", "submit: 0.02s, wait: 6.00s", "submit: 0.80s, wait: 9.00s"]
    run = RunTables()
    run.log_events = log_events_table(parse_lines(lines, "stdout.txt")[0])
    return run


@cache
def printed_service_waits() -> RunTables:
    """The guide's printouts: a 0.42 s round trip and a call that waited 6 s behind a 0.02 s submit."""
    from trace_doctor.ingest.parsers.logs import log_events_table, parse_lines

    run = RunTables()
    lines = ["API round-trip: 0.42s", "submit: 0.02s, wait: 6.00s"]
    run.log_events = log_events_table(parse_lines(lines, "stdout.txt")[0])
    return run


@cache
def service_queue_with_silent_loops() -> RunTables:
    """sl_server_queue (results 4 cycles late, 3.6 s over one cycle per step) with no [main] or [holder]
    task dump stamped 00:46:07-00:46:09: both loops stopped for at least 3 s."""
    run = load_run(fixture_run("sl_server_queue"))
    second = pl.col("timestamp").cast(pl.String).str.slice(11, 8)
    run.task_snapshots = run.task_snapshots.filter(~second.is_in(["00:46:07", "00:46:08", "00:46:09"]))
    return run


@cache
def request_pending_90_s() -> RunTables:
    """Task dumps of the simulated SDK: a forward_backward pending 91 s while both loops dump every second."""
    from guide_cases import replayed_dumps

    path = Path(tempfile.mkdtemp()) / "task_dump.txt"
    replayed_dumps(path, pending_dumps=92)
    return load_run(path)


@cache
def profile_awaiting_results() -> RunTables:
    """An async-mode profile of a loop on the simulated SDK that mostly awaits result_async (a queued service)."""
    from guide_cases import profile_awaiting_results as write_profile

    path = Path(tempfile.mkdtemp()) / "profile.json"
    write_profile(path)
    return load_run(path)


@cache
def blas_hold_in_a_long_run() -> RunTables:
    """sl_blas_main_thread plus 20 idle stack-watchdog blocks: its 5-block BLAS hold is 15% of the samples."""
    run = load_run(fixture_run("sl_blas_main_thread"))
    stacks = run.stack_snapshots
    first = stacks.filter(pl.col("snapshot") == stacks["snapshot"].min())
    last = int(stacks["snapshot"].max())
    dtype = first.schema["snapshot"]
    copies = [first.with_columns(pl.lit(last + 1 + i, dtype=dtype).alias("snapshot")) for i in range(20)]
    run.stack_snapshots = pl.concat([stacks, *copies])
    return run


@cache
def gil_monitor_with_erratic_steps() -> RunTables:
    """12 SFT steps alternating 1 s and 2 s, and a GIL-monitor line with 3.25 s of jitter."""
    rows = [
        {"step": i, "train_mean_nll": 1.0, "time/get_batch": 0.1, "time/total": 2.0 if i % 2 else 1.0}
        for i in range(12)
    ]
    run = run_from_rows(rows)
    run.log_events = _log_events("[GIL monitor] slept 3.75s instead of 0.5s (jitter: 3.25s) — likely GIL contention")
    return run


def _retry_events(seconds: list[float | None]) -> RunTables:
    """Tinker retries of 503s (cause + backoff lines), logged at these offsets in s (None: no timestamp)."""
    start = datetime(2026, 3, 1, 12, 0, 0)
    rows = []
    for offset in seconds:
        stamp = None if offset is None else start + timedelta(seconds=offset)
        for fields, message in (
            ('{"retry":"cause","status":503}', "Request attempt #1 failed with status 503"),
            ('{"retry":"backoff","backoff_s":0.5}', "Retrying in 0.50s"),
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
                    "fields": fields,
                }
            )
    run = RunTables()
    run.log_events = pl.DataFrame(rows, schema=LOG_EVENTS_SCHEMA)
    return run


@cache
def five_untimed_retries() -> RunTables:
    """5 Tinker retries in a log without timestamps."""
    return _retry_events([None] * 5)


@cache
def two_retries_in_one_minute() -> RunTables:
    """2 Tinker retries 10 s apart, timestamped."""
    return _retry_events([0.0, 10.0])


@cache
def slower_regime_at_the_end() -> RunTables:
    """40 steps: 28 at 1 s, then 12 at 2 s (a regime of 30% of the steps, more than min_steady_steps)."""
    rows = [
        {"step": i, "progress/batch": i, "time/train": 0.5, "time/total": (1.0 if i < 28 else 2.0) + 0.01 * (i % 3)}
        for i in range(40)
    ]
    return run_from_rows(rows)


@cache
def result_waits_in_pairs() -> RunTables:
    """Pipelined 0.6.1 SFT on a queueing service: 40 steps of 0.4 s client work, the result wait
    alternating 5 s / 25 s (results in pairs): 19 of the 39 steady steps are spikes in finish_batch."""
    rows = []
    for i in range(40):
        wait = (25.0 if i % 2 == 0 else 5.0) + 0.01 * (i % 3)
        rows.append(
            {
                "step": i,
                "time/get_batch": 0.4 + 0.002 * (i % 5),
                "time/submit_batch": 0.43 + 0.002 * (i % 5),
                "time/step": wait,
                "time/finish_batch": wait + 0.01,
            }
        )
    return run_from_rows(rows)


def _rl_rows(kl: list[float]) -> list[dict[str, Any]]:
    return [
        {
            "step": i,
            "progress/batch": i,
            "env/all/reward/total": 0.5,
            "optim/kl_sample_train_v1": value,
            "optim/kl_sample_train_v2": value,
        }
        for i, value in enumerate(kl)
    ]


@cache
def kl_drifting_late() -> RunTables:
    """RL run healthy for 14 steps, then KL 0.04 on the last 6 (32% of the later steps)."""
    return run_from_rows(_rl_rows([1e-4] * 14 + [0.04] * 6))


@cache
def async_over_bound() -> RunTables:
    """Async RL (max_steps_off_policy 2) whose oldest sample is 3 steps behind on 2 of 20 steps."""
    rows = [
        {
            "step": i,
            "training_client/step": i,
            "optim/kl_sample_train_v2": 1e-3,
            "sampling_client/step_min": max(0, i - (3 if i in (9, 14) else 1)),
            "sampling_client/step_max": i,
        }
        for i in range(20)
    ]
    return run_from_rows(rows, trainer="rl", trainer_mode="async", config={"async_config": {"max_steps_off_policy": 2}})


@cache
def async_stragglers() -> RunTables:
    """0.6.1 async RL (max_steps_off_policy 1, async/staleness_*) with stragglers 4 steps behind on 3 of 20 steps."""
    late = (6, 11, 16)
    rows = [
        {
            "step": i,
            "training_client/step": i,
            "optim/kl_sample_train_v2": 1e-3,
            "sampling_client/step_min": max(0, i - (4 if i in late else 1)),
            "sampling_client/step_max": i,
            "async/staleness_max": 4 if i in late else min(i, 1),
        }
        for i in range(20)
    ]
    return run_from_rows(rows, trainer="rl", trainer_mode="async", config={"async_config": {"max_steps_off_policy": 1}})


@cache
def sawtooth_missing_a_tooth() -> RunTables:
    """Sync RL saving every 8 steps whose KL resets at 3 of its 4 saves (the one before 24 is low)."""
    kl = [1e-3 + 4e-3 * (i % 8) for i in range(40)]
    kl[23] = 1.2e-3
    return run_from_rows(_rl_rows(kl), trainer="rl", trainer_mode="sync", config={"save_every": 8})


@cache
def spike_then_elevated() -> RunTables:
    """SFT NLL steady at 1.0, a spike to 3.0 at step 30, back to 1.0 for 3 steps, then 1.3 to the end."""
    nll = [1.0 + 0.01 * ((i * 7) % 5 - 2) for i in range(30)] + [3.0, 1.0, 1.0, 1.0] + [1.3] * 16
    return run_from_rows([{"step": i, "train_mean_nll": v, "num_loss_tokens": 5e4} for i, v in enumerate(nll)])


@cache
def kl_high_then_rising() -> RunTables:
    """RL run with KL 0.02 at step 0 (above the band), then 0.05: 2.5x the first-step value."""
    return run_from_rows(_rl_rows([0.02] + [0.05] * 19))


@cache
def distillation_teacher_kl() -> RunTables:
    """Distillation run whose teacher_kl stays at 0.3 from the first step."""
    return run_from_rows([{"step": i, "progress/batch": i, "teacher_kl": 0.3} for i in range(5)])


@cache
def kl_step0_among_peers() -> RunTables:
    """RL run with the recommended renderer, first KL 0.06, three peers of its model and renderer at 0.02-0.03."""
    rows = [
        {"step": i, "progress/batch": i, "env/all/reward/total": 0.5, "optim/kl_sample_train_v2": 0.06}
        for i in range(10)
    ]
    run = run_from_rows(rows, model_name="Qwen/Qwen3-8B", renderer_name="qwen3", temperature=1.0)
    run.peers = {"step0_kl": [0.02, 0.025, 0.03]}
    return run


@cache
def sft_nll_worse_than_uniform() -> RunTables:
    """SFT run whose first train NLL is 24.6 nats/token: worse than a uniform guess over any vocabulary."""
    rows = [{"step": i, "train_mean_nll": 24.6 - 0.1 * i, "num_loss_tokens": 1000.0} for i in range(30)]
    return run_from_rows(rows, trainer="sl", model_name="Qwen/Qwen3-8B", renderer_name="qwen3")


@cache
def sample_spans_near_zero() -> RunTables:
    """RL metrics where sample_async takes 2 ms inside a 2 s policy_sample (the tinker 0.38 + py3.11 trap)."""
    rows = [
        {
            "step": i,
            "progress/batch": i,
            "env/all/reward/total": 0.5,
            "time/sample_async:mean": 0.002,
            "time/policy_sample:mean": 2.0,
        }
        for i in range(10)
    ]
    return run_from_rows(rows)


SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"


@cache
def profile_serializing() -> RunTables:
    """A sync-mode profile of 10 s: 6 s idle in epoll, 2.5 s in pydantic model_dump, 1.5 s tokenizing."""
    tree = [  # (frame_id, parent_id, function, file, line, time_s, application code)
        (1, None, "run", f"{STDLIB}/asyncio/runners.py", 118, 10.0, False),
        (2, 1, "_run_once", f"{STDLIB}/asyncio/base_events.py", 1898, 10.0, False),
        (3, 2, "select", f"{STDLIB}/selectors.py", 451, 6.0, False),
        (4, 3, "epoll.poll", "<built-in>", 0, 6.0, False),
        (5, 2, "_run", f"{STDLIB}/asyncio/events.py", 80, 4.0, False),
        (6, 5, "train_step", "train.py", 40, 4.0, True),
        (7, 6, "model_dump", f"{SITE}/tinker/_compat.py", 150, 2.5, False),
        (8, 7, "model_dump", f"{SITE}/pydantic/main.py", 420, 2.5, False),
        (9, 8, "[self]", "", 0, 2.5, False),
        (10, 6, "tokenize", "train.py", 12, 1.5, True),
        (11, 10, "encode", f"{SITE}/tokenizers/implementations/base_tokenizer.py", 90, 1.5, False),
        (12, 11, "[self]", "", 0, 1.5, False),
    ]
    depth: dict[int, int] = {}
    frames = []
    for fid, parent, function, file_path, line, time_s, app in tree:
        depth[fid] = 0 if parent is None else depth[parent] + 1
        frames.append(
            {
                "profile": "profile.json",
                "frame_id": fid,
                "parent_id": parent,
                "depth": depth[fid],
                "function": function,
                "file_path": file_path,
                "line_no": line,
                "class_name": None,
                "time_s": time_s,
                "self_time_s": None,
                "await_time_s": 0.0,
                "is_application_code": app,
                "synthetic": function.startswith("["),
            }
        )
    run = RunTables()
    run.frames = pl.DataFrame(frames, schema=FRAMES_SCHEMA)
    profile = {
        "profile": "profile.json",
        "format": "json",
        "async_mode": "disabled",
        "target_description": "Program: train.py",
        "start_time": 0.0,
        "duration_s": 10.0,
        "cpu_time_s": None,
        "sample_count": 1000,
    }
    run.profiles = pl.DataFrame([profile], schema=PROFILES_SCHEMA)
    return run


@cache
def checkpoint_in_next_step() -> RunTables:
    """50 pipelined SFT steps of 10 s; an 8 s checkpoint every 10 steps lands in the next step: 32 s, 6% of wall."""
    rows = []
    for i in range(50):
        row = {"step": i, "train_mean_nll": 1.0, "time/step": 8.0, "time/total": 10.0 + 0.1 * (i % 3)}
        if i > 0 and i % 10 == 0:
            row["time/save_checkpoint"] = 8.0
        if i > 1 and (i - 1) % 10 == 0:
            row["time/total"] += 8.0
        rows.append(row)
    return run_from_rows(rows)


@cache
def main_blocked_while_holder_dumps() -> RunTables:
    """[main] silent for 3 s (3 dump intervals) while the SDK loop's [holder] dumps every second."""
    t0 = datetime(2026, 3, 5, 12, 0, 0)
    schedule = [(t, label) for t in range(0, 5) for label in ("holder", "main")]
    schedule += [(t, "holder") for t in range(5, 8)]
    schedule += [(t, label) for t in range(8, 12) for label in ("holder", "main")]
    rows = [
        {
            "source": "stdout.txt",
            "line": 10 * i + 1,
            "timestamp": t0 + timedelta(seconds=offset),
            "label": label,
            "snapshot": i,
            "task_count": 1,
            "interval_s": 1.0,
            "task_name": "Task-1",
            "state": "pending",
            "coroutine": "<coroutine object x>",
        }
        for i, (offset, label) in enumerate(schedule)
    ]
    run = RunTables()
    run.task_snapshots = pl.DataFrame(rows, schema=TASK_SNAPSHOTS_SCHEMA)
    return run


@cache
def holder_silent_while_main_dumps() -> RunTables:
    """The SDK loop's [holder] silent for 7 s while [main] keeps dumping: one direct reading of a starved
    SDK thread and nothing else (a GIL stall of medium confidence)."""
    t0 = datetime(2026, 3, 5, 12, 0, 0)
    schedule = [(t, label) for t in range(0, 5) for label in ("holder", "main")]
    schedule += [(t, "main") for t in range(5, 12)]
    schedule += [(t, label) for t in range(12, 14) for label in ("holder", "main")]
    rows = [
        {
            "source": "stdout.txt",
            "line": 10 * i + 1,
            "timestamp": t0 + timedelta(seconds=offset),
            "label": label,
            "snapshot": i,
            "task_count": 1,
            "interval_s": 1.0,
            "task_name": "Task-1",
            "state": "pending",
            "coroutine": "<coroutine object x>",
        }
        for i, (offset, label) in enumerate(schedule)
    ]
    run = RunTables()
    run.task_snapshots = pl.DataFrame(rows, schema=TASK_SNAPSHOTS_SCHEMA)
    return run


@cache
def entropy_collapsing_with_longer_completions() -> RunTables:
    """Entropy 0.5 for 30 steps then 0.01 for 10, while completions grow from 100 to 150 tokens per turn."""
    rows = [
        {"step": s, "optim/entropy": 0.5 if s < 30 else 0.01, "env/all/ac_tokens_per_turn": 100.0 if s < 30 else 150.0}
        for s in range(40)
    ]
    return run_from_rows(rows, trainer="rl")


@cache
def pipelined_loop_served_late() -> RunTables:
    """A pipelined SFT loop (step k+1 submitted before step k's results are awaited, optim right behind
    forward_backward, 2 ms hand-offs) whose results come 3-5 cycles of 0.1 s late; one transition in ten
    is sequential (90% pipelined)."""
    cycles = [3, 4, 5, 4, 3, 5, 4, 3, 4, 5] * 2
    spans: list[dict] = []

    def submit(step: int, at: float) -> float:
        spans.append(_span("submit_batch", at, 0.006, step=step))
        spans.append(_span("forward_backward_async", at + 0.001, 0.002, step=step))
        spans.append(_span("optim_step_async", at + 0.003, 0.002, step=step))
        return at + 0.007

    t = submit(0, 0.0)
    for step, k in enumerate(cycles):
        sequential = step % 10 == 9  # the next step submitted only after this one's results
        if not sequential and step + 1 < len(cycles):
            t = submit(step + 1, t)
        spans.append(_span("finish_batch", t, k * 0.1 + 0.001, step=step))
        spans.append(_span("step", t, k * 0.1, step=step))
        t += k * 0.1 + 0.002
        if sequential and step + 1 < len(cycles):
            t = submit(step + 1, t)
    spans.insert(0, _span("main", 0.0, max(s["end_us"] for s in spans) / 1e6))
    run = _traced(spans)
    run.meta.trainer = "sl"
    return run


# --- learning-signal runs (TD203 / TD205 / TD207) ---------------------------------------------


@cache
def uniform_reward_log_only() -> RunTables:
    """An RL run with a mean reward but no per-group metrics, whose log says 4 batches had uniform rewards."""
    run = run_from_rows([{"step": s, "env/all/reward/total": 0.2} for s in range(20)], trainer="rl")
    message = "All rewards are uniform. There will be no gradient"
    rows = [
        {
            "source": "logs.log",
            "line": i,
            "timestamp": None,
            "logger": "tinker_cookbook.rl.data_processing",
            "level": "WARNING",
            "kind": "warning",
            "message": message,
            "fields": "{}",
        }
        for i in range(4)
    ]
    run.log_events = pl.DataFrame(rows, schema=LOG_EVENTS_SCHEMA)
    return run


@cache
def entropy_mostly_collapsed() -> RunTables:
    """Entropy 0.5 for 20 steps, then a late window where 7 of 10 steps are near zero and 3 are not."""
    late = [0.01, 0.2, 0.01, 0.01, 0.2, 0.01, 0.01, 0.2, 0.01, 0.01]
    values = [0.5] * 30 + late
    return run_from_rows([{"step": s, "optim/entropy": v} for s, v in enumerate(values)], trainer="rl")


@cache
def parse_errors_on_a_quarter() -> RunTables:
    """stop/parse_error 25% on 10 of 40 steps, 1% on the rest: a quarter of the run."""
    values = [0.25 if s % 4 == 0 else 0.01 for s in range(40)]
    return run_from_rows([{"step": s, "env/all/stop/parse_error": v} for s, v in enumerate(values)], trainer="rl")


@cache
def truncation_rising_late() -> RunTables:
    """stop/max_tokens 5% for 33 steps, then 50% on the last 9: truncation grows at the end."""
    values = [0.05] * 33 + [0.5] * 9
    return run_from_rows([{"step": s, "env/all/stop/max_tokens": v} for s, v in enumerate(values)], trainer="rl")


@cache
def mean_length_near_cap() -> RunTables:
    """ac_tokens_per_turn at 93% of config max_tokens (no stop keys, no rollouts)."""
    run = run_from_rows([{"step": s, "env/all/ac_tokens_per_turn": 1905.0} for s in range(20)], trainer="rl")
    run.meta.config = {"max_tokens": 2048}
    return run


def legacy_sync_rl(
    steps: int, *, untimed_s: float, train_s: float, slow: dict[int, float] | None = None
) -> Callable[[], RunTables]:
    """The cookbook's sync RL loop before the window timers, metrics only: it times training, data
    assembly and the checkpoint, not its sampling, so `untimed_s` of each `time/total` is the rollouts;
    `slow` adds untimed seconds to some steps (the same tokens: a host asleep, or a long rollout)."""

    def build() -> RunTables:
        rows = []
        for i in range(steps):
            untimed = untimed_s + (slow or {}).get(i, 0.0)
            rows.append(
                {
                    "step": i,
                    "progress/batch": i,
                    "env/all/total_episodes": 512,
                    "env/all/total_ac_tokens": 400_000 + 1_000 * (i % 5),
                    "time/train": train_s,
                    "time/assemble_training_data": 0.5,
                    "time/save_checkpoint": 2.0,
                    "time/total": untimed + train_s + 2.5,
                }
            )
        return run_from_rows(rows)

    return build


# --- the probe table --------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """A run, and a value for one threshold that changes what its rule reports on that run."""

    run: str | Callable[[], RunTables]  # fixtures/runs/<name>, a path under fixtures/, or a builder
    value: Any
    changes: str  # what the override changes, for the reader
    observed_by: str | None = None  # a shared knob: the rule whose outcome shows it
    baseline: str | None = None  # a regression rule: the fixture the run is compared with


def _legacy_pipelined_sft(**options) -> Callable[[], RunTables]:
    """A replayed legacy pipelined SFT run whose batches take most of a service turn (2.5-3 s of 2.5-4.5 s):
    read as overlapping windows they hide behind the in-flight step (get-batch-bottleneck passes); summed
    as written, the windows double every step and get_batch is over 20% of each: fired."""
    return lambda: run_from_rows(replay_rows(60, pipelined=True, get_batch_s=(2.5, 3.0), **options)[0])


PROBES: dict[tuple[str, str], Probe] = {
    # pipelining-gap
    ("pipelining-gap", "min_sequential_step_share"): Probe(
        partly_sequential_loop, 0.3, "40% of steps awaited the fb result: passed -> fired"
    ),
    ("pipelining-gap", "min_seconds_lost"): Probe(
        long_loop_short_waits, 3.0, "2 s lost (1% of the run): fired -> passed"
    ),
    ("pipelining-gap", "min_fraction_lost"): Probe(
        short_loop_short_waits, 0.2, "0.5 s lost (12.5% of the run): fired -> passed"
    ),
    # get-batch-bottleneck
    ("get-batch-bottleneck", "min_share"): Probe(
        "sl_healthy_pipelined", 0.05, "get_batch at 9.4% of a steady step: passed -> fired"
    ),
    ("get-batch-bottleneck", "min_steady_steps"): Probe(
        "sl_slow_get_batch", 50, "30 steps with get_batch timing: fired -> not_applicable"
    ),
    ("get-batch-bottleneck", "high_confidence_steps"): Probe(
        "sl_slow_get_batch", 50, "a median over 30 steady steps: high -> medium confidence"
    ),
    # warmup-slowness
    ("warmup-slowness", "min_ratio"): Probe(
        "sl_warmup_only", 10.0, "a warm-up at 9.9x the steady median: fired -> passed"
    ),
    # steady-slowness
    ("steady-slowness", "max_cycles_per_step"): Probe(
        "sl_healthy_pipelined", 1.0, "steps of 1.1 clock cycles of 0.046 s: passed -> fired"
    ),
    ("steady-slowness", "max_client_share"): Probe(
        "sl_sequential_await", 0.7, "53% of each step on the client: fired -> passed"
    ),
    ("steady-slowness", "max_submit_s"): Probe(
        "sl_steady_slow", 0.05, "the finding adds that submit-only calls take 0.07 s (median)"
    ),
    ("steady-slowness", "sampling_info_share"): Probe(
        legacy_sync_rl(12, untimed_s=60.0, train_s=35.0), 0.7, "untimed sampling 62% of the steps: fired -> passed"
    ),
    ("steady-slowness", "sampling_warning_share"): Probe(
        legacy_sync_rl(12, untimed_s=400.0, train_s=20.0), 0.99, "untimed sampling 95% of the steps: warning -> info"
    ),
    ("steady-slowness", "min_steady_steps"): Probe(
        "sl_steady_slow", 1000, "fewer steady steps with a total: fired -> not_applicable"
    ),
    # gil-stall
    ("gil-stall", "min_monitor_jitter_s"): Probe(
        "sl_gil_stall", 2.0, "the GIL-monitor signal keeps 1 of its 2 lines (1.78 s jitter dropped)"
    ),
    ("gil-stall", "min_silent_intervals"): Probe("sl_gil_stall", 5.0, "all-loops-silent episodes: 2 -> 1"),
    ("gil-stall", "min_silence_s"): Probe("sl_gil_stall", 2.0, "all-loops-silent episodes: 2 -> 1"),
    ("gil-stall", "min_blocked_submit_s"): Probe(
        submit_blocked_while_sampling, 1.5, "the 1.2 s submit during a stretched round trip no longer counts: passed"
    ),
    ("gil-stall", "high_confidence_score"): Probe(
        "sl_gil_stall", 10.0, "independent readings weighing 8.5 in all: high -> medium confidence"
    ),
    ("gil-stall", "high_confidence_readings"): Probe(
        "sl_gil_stall", 10, "fewer corroborating readings than that: high -> medium confidence"
    ),
    ("gil-stall", "medium_confidence_score"): Probe(
        holder_silent_while_main_dumps, 3.0, "one direct reading (weight 2): medium -> low confidence"
    ),
    # blocking-call-in-async
    ("blocking-call-in-async", "min_blocked_s"): Probe(
        "sl_steady_slow", 0.1, "30 forward_backward submits of 0.16 s block the caller: passed -> fired"
    ),
    ("blocking-call-in-async", "min_silent_intervals"): Probe(
        main_blocked_while_holder_dumps, 4.0, "[main] silent for 3 dump intervals: fired -> passed"
    ),
    ("blocking-call-in-async", "min_silence_s"): Probe(
        main_blocked_while_holder_dumps, 5.0, "[main] silent for 3 s: fired -> passed"
    ),
    # run-stopped
    ("run-stopped", "min_stuck_step_times"): Probe(
        "sl_stopped_service_hang",
        1000.0,
        "a 5 s hold of 50 ms steps is under 1000 steps: hung on the service -> killed",
    ),
    ("run-stopped", "min_stuck_s"): Probe(
        "sl_stopped_service_hang", 60.0, "the 5 s hold is under a minute: hung on the service -> killed"
    ),
    # server-side-wait
    ("server-side-wait", "min_cycles_per_step"): Probe(
        pipelined_loop_served_late, 5.0, "a step every 4 cycles (mean): fired -> passed"
    ),
    ("server-side-wait", "max_submit_s"): Probe(
        pipelined_loop_served_late, 0.001, "2 ms hand-offs count as slow submissions: fired -> passed"
    ),
    ("server-side-wait", "min_pipelined_share"): Probe(
        pipelined_loop_served_late, 0.96, "18 of 19 transitions pipelined no longer rule the client out: passed"
    ),
    ("server-side-wait", "max_starved_share"): Probe(
        service_queue_with_silent_loops, 0.9, "3.0 s of silent SDK-loop dumps against 3.6 s late: passed -> fired"
    ),
    ("server-side-wait", "min_silent_intervals"): Probe(
        service_queue_with_silent_loops, 20, "a 3 s silence is under 20 dump intervals (5 s): passed -> fired"
    ),
    ("server-side-wait", "min_silence_s"): Probe(
        service_queue_with_silent_loops, 5.0, "a 3-4 s silence is under 5 s: passed -> fired"
    ),
    ("server-side-wait", "min_printed_wait_s"): Probe(
        printed_service_waits, 10.0, "a 6 s wait is no longer long: fired -> not_applicable"
    ),
    ("server-side-wait", "max_round_trip_s"): Probe(
        printed_service_waits, 0.3, "a 0.42 s round trip no longer rules the network out: fired -> not_applicable"
    ),
    ("server-side-wait", "min_pending_s"): Probe(
        request_pending_90_s, 120.0, "a request pending 91 s is no longer the service's: fired -> not_applicable"
    ),
    ("server-side-wait", "min_result_wait_share"): Probe(
        profile_awaiting_results, 0.99, "a profile mostly awaiting results is no longer called the service's"
    ),
    ("network-latency", "slow_round_trip_s"): Probe(guide_printouts, 3.0, "a 2.5 s round trip: fired -> passed"),
    ("network-latency", "slow_wait_s"): Probe(guide_printouts, 10.0, "the 6 s wait is no longer a network wait"),
    ("network-latency", "slow_submit_s"): Probe(
        guide_printouts, 1.0, "the 9 s wait behind a 0.8 s submit now counts as a network wait"
    ),
    ("server-side-wait", "min_step_intervals"): Probe(
        pipelined_loop_served_late, 1000, "fewer traced step intervals: fired -> not_applicable"
    ),
    ("gil-stall", "step_time_max_robust_cv"): Probe(
        "sl_gil_stall", 0.01, "a robust CV of 0.03 becomes a sixth, supporting signal"
    ),
    ("gil-stall", "heartbeat_match_ratio"): Probe(
        "sl_gil_stall", 1.001, "heartbeat outages of 3.34/1.87 s no longer match stalls of 3.27/1.84 s: no placement"
    ),
    ("gil-stall", "step_time_min_steady_steps"): Probe(
        gil_monitor_with_erratic_steps, 20, "12 erratic steps no longer support the GIL-monitor line: 2 signals -> 1"
    ),
    # heartbeat-stall
    ("heartbeat-stall", "min_warnings"): Probe("sl_gil_stall", 3, "2 heartbeat warnings: fired -> passed"),
    # request-retries
    ("request-retries", "frequent_retries"): Probe(
        five_untimed_retries, 5, "5 transient Tinker retries become frequent: info -> warning"
    ),
    ("request-retries", "frequent_retries_per_minute"): Probe(
        two_retries_in_one_minute, 2.0, "2 retries in one minute become a burst: info -> warning"
    ),
    # serialization-stall
    ("serialization-stall", "min_share"): Probe(
        "demo", 0.01, "0.40 s (3%) of the profile in model_dump: passed -> fired"
    ),
    ("serialization-stall", "min_seconds"): Probe(
        profile_serializing, 3.0, "2.5 s (25%) of serialization: fired -> passed"
    ),
    ("serialization-stall", "max_submit_median_s"): Probe(
        "sl_steady_slow", 0.2, "forward_backward submits of 0.16 s (median) no longer count: fired -> passed"
    ),
    ("serialization-stall", "min_submits"): Probe(
        "sl_steady_slow", 1000, "too few submissions per call to judge a median: fired -> passed"
    ),
    # cpu-bound-main-thread
    ("cpu-bound-main-thread", "min_share"): Probe("demo", 0.5, "43% of the profile in CPU code: fired -> passed"),
    ("cpu-bound-main-thread", "min_seconds"): Probe("demo", 10.0, "5.2 s of CPU code: fired -> passed"),
    ("cpu-bound-main-thread", "min_stack_blocks"): Probe(
        "sl_gil_stall", 100, "the stack-watchdog finding goes, the profile's stays"
    ),
    ("cpu-bound-main-thread", "min_consecutive_blocks"): Probe(
        blas_hold_in_a_long_run, 6, "a 5-block hold in BLAS, 15% of the samples, is no longer named: fired -> passed"
    ),
    # profile-without-async-mode
    ("profile-without-async-mode", "min_idle_share"): Probe(
        "profiles/profile_cli.json", 0.7, "65% of the CLI profile idle in epoll: fired -> passed"
    ),
    # inconsistent-step-times
    ("inconsistent-step-times", "max_robust_cv"): Probe(
        "sl_healthy_pipelined", 0.01, "a robust CV of 0.02: passed -> fired"
    ),
    ("inconsistent-step-times", "spike_ratio"): Probe(
        "sl_healthy_pipelined", 2.0, "step 20 at 2.9x the median is a spike: passed -> fired"
    ),
    ("inconsistent-step-times", "min_steady_steps"): Probe(
        "sl_healthy_pipelined", 30, "29 steady steps: passed -> not_applicable"
    ),
    ("inconsistent-step-times", "min_regime_ratio"): Probe(
        slower_regime_at_the_end, 2.5, "a 2x slower stretch is not a regime change: fired -> passed"
    ),
    ("inconsistent-step-times", "high_confidence_regime_steps"): Probe(
        slower_regime_at_the_end, 10, "levels of 28 and 12 steps are lasting: medium -> high confidence"
    ),
    ("inconsistent-step-times", "explained_share"): Probe(
        "demo", 0.99, "a spike's phase must hold nearly all of its excess to be named"
    ),
    ("inconsistent-step-times", "untimed_spike_share"): Probe(
        "demo", 0.0, "every spike is said to lie outside the timed phases"
    ),
    ("inconsistent-step-times", "min_regime_share"): Probe(
        slower_regime_at_the_end, 0.5, "a slow regime of 30% of the steps is too short: fired -> passed"
    ),
    ("inconsistent-step-times", "min_wall_share_alone"): Probe(
        legacy_sync_rl(6, untimed_s=60.0, train_s=30.0, slow={3: 600.0}),
        0.7,
        "6 steps, one untimed 600 s longer: 56% of the wall, reported -> below 70%: not applicable",
    ),
    ("inconsistent-step-times", "min_wait_spike_share"): Probe(
        result_waits_in_pairs,
        0.6,
        "long waits on 49% of the steps are spikes, not the service's pattern: info -> warning",
    ),
    # scheduled-work
    ("scheduled-work", "min_share_of_wall"): Probe(
        checkpoint_in_next_step, 0.1, "checkpoints at 6% of wall time: fired -> passed"
    ),
    ("scheduled-work", "min_seconds"): Probe(checkpoint_in_next_step, 60.0, "32 s of checkpoints: fired -> passed"),
    # renderer-kl-step0
    ("renderer-kl-step0", "max_teacher_kl_step0"): Probe(
        distillation_teacher_kl, 0.5, "teacher_kl 0.3 at step 0 is inside the band: fired -> passed"
    ),
    ("renderer-kl-step0", "min_teacher_steps_for_trend"): Probe(
        distillation_teacher_kl, 10, "5 teacher_kl steps are too few to see a trend: the finding says so (low)"
    ),
    ("renderer-kl-step0", "min_peer_runs"): Probe(
        kl_step0_among_peers, 4, "3 peers are too few to compare with: low -> medium confidence"
    ),
    ("renderer-kl-step0", "peer_outlier_ratio"): Probe(
        kl_step0_among_peers, 2.0, "0.06 is over 2x the peers' 0.025: alike (low) -> outlier (high)"
    ),
    # kl-drift
    ("kl-drift", "min_share_above"): Probe(kl_drifting_late, 0.5, "KL high on 32% of later steps: fired -> passed"),
    ("kl-drift", "min_judged_steps"): Probe(kl_drifting_late, 1000, "fewer later KL values: fired -> not_applicable"),
    ("kl-drift", "min_steps_above"): Probe(kl_drifting_late, 1000, "fewer steps above the band: fired -> passed"),
    ("kl-drift", "high_confidence_share"): Probe(
        kl_drifting_late, 0.1, "KL high on 32% of later steps is sustained: medium -> high confidence"
    ),
    ("kl-drift", "min_rise_over_step0"): Probe(
        kl_high_then_rising, 3.0, "a 2.5x rise over step 0 is the step-0 mismatch: fired -> passed"
    ),
    # stale-sampler
    ("stale-sampler", "max_stale_share"): Probe(
        "training/rl_async_stale", 0.5, "15% of the trained groups too stale: fired -> passed"
    ),
    ("stale-sampler", "min_steps_over_bound"): Probe(
        async_over_bound, 3, "2 steps beyond max_steps_off_policy: fired -> passed"
    ),
    ("stale-sampler", "max_straggler_step_share"): Probe(
        async_stragglers, 0.2, "stragglers on 15% of the steps: warning -> info"
    ),
    ("stale-sampler", "high_confidence_steps"): Probe(
        "training/rl_async_stale", 100000, "a stale share over fewer trained steps: high -> medium confidence"
    ),
    # training-instability
    ("training-instability", "spike_window"): Probe(
        "training/sft_loss_spikes", 60, "no 60-step window before either spike: fired -> passed"
    ),
    ("training-instability", "spike_min_sigmas"): Probe(
        "training/sft_loss_spikes", 100.0, "spikes of 47 and 64 robust σ: fired -> passed"
    ),
    ("training-instability", "spike_min_rise"): Probe(
        "training/sft_loss_spikes", 3.0, "spikes 2.5x and 2x above the level: fired -> passed"
    ),
    ("training-instability", "recovery_steps"): Probe(
        spike_then_elevated, 10, "back for 3 steps, then 30% high: recovered (info) -> diverged (warning)"
    ),
    ("training-instability", "min_spikes_for_warning"): Probe(
        "training/sft_loss_spikes", 3, "two recovered spikes: warning -> info"
    ),
    ("training-instability", "min_spike_rate"): Probe(
        "training/sft_loss_spikes", 0.05, "2 spikes in 80 steps (0.025 per step): warning -> info"
    ),
    # constant-reward-groups
    ("constant-reward-groups", "min_constant_share"): Probe(
        "training/rl_async_too_easy", 0.9, "81% constant groups per step: fired -> passed"
    ),
    ("constant-reward-groups", "min_share_of_steps"): Probe(
        "training/rl_sync_late_saturation", 0.2, "all-good groups on the last 23% of the steps: passed -> fired"
    ),
    ("constant-reward-groups", "min_steps"): Probe(
        "training/rl_sync_all_bad_dropped", 40, "30 exported iterations are too few: exact -> estimate (medium)"
    ),
    ("constant-reward-groups", "dominant_kind_share"): Probe(
        "training/rl_sync_all_bad_dropped", 1.0, "a few all-good groups among the all-bad: all-bad -> both"
    ),
    ("constant-reward-groups", "late_onset_share"): Probe(
        "training/rl_sync_saturated_midway", 0.5, "saturation at step 16 of 60 is early: info -> warning"
    ),
    ("constant-reward-groups", "min_reward_gain"): Probe(
        "training/rl_sync_saturated_midway", 0.8, "a 0.57 rise is not learning: saturated -> too easy"
    ),
    ("constant-reward-groups", "min_log_lines"): Probe(
        uniform_reward_log_only, 5, "4 uniform-reward lines: fired -> not applicable"
    ),
    # entropy-collapse
    ("entropy-collapse", "max_late_entropy"): Probe(
        "training/rl_sync_entropy_collapse", 0.005, "late median 0.0105: fired -> passed"
    ),
    ("entropy-collapse", "max_late_over_early"): Probe(
        "training/rl_sync_entropy_collapse", 0.01, "late is 2.1% of early: fired -> passed"
    ),
    ("entropy-collapse", "min_early_entropy"): Probe(
        "training/rl_sync_entropy_collapse", 0.6, "early median 0.49 counts as low from the start: fired -> passed"
    ),
    ("entropy-collapse", "window_share"): Probe(
        "training/rl_sync_entropy_collapse", 0.5, "the late window is the last 25 steps, not 10: another finding"
    ),
    ("entropy-collapse", "min_window"): Probe(
        "training/rl_sync_entropy_collapse", 10, "early level over 10 steps instead of 3: another finding"
    ),
    ("entropy-collapse", "length_growth"): Probe(
        entropy_collapsing_with_longer_completions, 1.4, "completions 1.5x longer: the finding adds a repetition note"
    ),
    ("entropy-collapse", "min_steps"): Probe("training/rl_sync_entropy_collapse", 60, "50 steps: fired -> n/a"),
    ("entropy-collapse", "min_late_share_below"): Probe(
        entropy_mostly_collapsed, 0.6, "7 of 10 late steps below the floor: passed -> fired"
    ),
    ("entropy-collapse", "saturated_reward"): Probe(
        "training/rl_sync_saturated_midway", 1.0, "late reward 0.98 of the best is not saturated: info -> warning"
    ),
    ("entropy-collapse", "min_reward_gain"): Probe(
        "training/rl_sync_saturated_midway", 0.8, "a 0.6 rise is not learning: saturated (info) -> hidden (warning)"
    ),
    ("entropy-collapse", "tail_steps"): Probe(
        "training/rl_sync_entropy_tail_collapse", 2, "the last 2 steps hold 2 lows, not 3: fired -> passed"
    ),
    ("entropy-collapse", "tail_min_below"): Probe(
        "training/rl_sync_entropy_tail_collapse", 4, "3 of the last 4 steps below the floor: fired -> passed"
    ),
    # response-parse-errors
    ("response-parse-errors", "min_share"): Probe(
        "training/rl_sync_parse_errors", 0.4, "stop/parse_error at most 35%: fired -> passed"
    ),
    ("response-parse-errors", "min_steps_above"): Probe(
        "training/rl_sync_parse_errors", 41, "40 steps above: fired -> passed"
    ),
    ("response-parse-errors", "min_share_of_steps"): Probe(
        parse_errors_on_a_quarter, 0.2, "10 of 40 steps above 10%: passed -> fired"
    ),
    # overfitting
    ("overfitting", "min_evals"): Probe("training/sft_overfitting", 13, "12 evaluations: fired -> n/a"),
    ("overfitting", "min_evals_after_best"): Probe(
        "training/sft_overfitting", 8, "7 evaluations after the best: fired -> passed"
    ),
    ("overfitting", "min_rise"): Probe("training/sft_overfitting", 0.5, "+24% above the best: fired -> passed"),
    ("overfitting", "min_train_fall"): Probe("training/sft_overfitting", 0.6, "train NLL fell 41%: fired -> passed"),
    ("overfitting", "train_window"): Probe("training/sft_overfitting", 61, "120 train steps < 2 x 61: fired -> n/a"),
    # checkpoint-risk
    ("checkpoint-risk", "min_safe_ttl_s"): Probe(
        "training/rl_sync_rolling_only_stopped", 3600.0, "a 2 h rolling TTL is not short: warning -> info"
    ),
    # truncated-samples
    ("truncated-samples", "min_share"): Probe(
        "training/rl_stream_truncated_thinking", 0.5, "44% cut at max_tokens: fired -> passed"
    ),
    ("truncated-samples", "min_steps_above"): Probe(
        "training/rl_sync_truncated_rollouts", 20, "19 of 20 iterations above: fired -> passed"
    ),
    ("truncated-samples", "late_share"): Probe(
        truncation_rising_late, 0.5, "9 truncated steps are a minority of the last half: fired -> passed"
    ),
    ("truncated-samples", "mean_near_cap"): Probe(
        mean_length_near_cap, 0.95, "mean at 93% of the cap: fired -> passed"
    ),
    ("truncated-samples", "short_thinking_max_tokens"): Probe(
        "training/rl_stream_truncated_thinking", 1024, "2048 is no longer a short budget: the thinking note goes"
    ),
    # renderer-model-mismatch
    ("renderer-model-mismatch", "max_sft_step0_nll"): Probe(
        "training/config_sft_wrong_renderer_nll", 4.0, "step-0 test NLL 3.16 is under 4: the NLL finding goes"
    ),
    ("renderer-model-mismatch", "min_worse_than_uniform_nll"): Probe(
        sft_nll_worse_than_uniform, 30.0, "24.6 nats is under 30: the data finding becomes the renderer hint"
    ),
    # config-risk
    ("config-risk", "max_rl_learning_rate"): Probe(
        "training/config_rl_lr_too_high", 0.05, "RL learning rate 1e-2 is under 5e-2: fired -> passed"
    ),
    ("config-risk", "min_rl_learning_rate"): Probe(
        "training/config_substeps_ppo", 1e-4, "RL learning rate 4e-5 is below 1e-4: passed -> fired (low)"
    ),
    ("config-risk", "max_sft_lr_over_get_lr"): Probe(
        "training/config_sft_lr_too_high", 30.0, "SFT learning rate 21x get_lr is under 30x: fired -> passed"
    ),
    ("config-risk", "min_sft_lr_over_get_lr"): Probe(
        "training/sft_healthy", 0.5, "SFT learning rate 0.43x get_lr is below 0.5x: passed -> fired (low)"
    ),
    # known-bad-dependency
    ("known-bad-dependency", "trap_max_sample_share"): Probe(
        sample_spans_near_zero, 0.0005, "sample_async at 0.1% of policy_sample is plausible: fired -> passed"
    ),
    ("known-bad-dependency", "trap_min_policy_sample_s"): Probe(
        sample_spans_near_zero, 5.0, "a 2 s policy_sample is too short to judge: fired -> passed"
    ),
    # step-time-regression (against a baseline)
    ("step-time-regression", "min_relative_effect"): Probe(
        "sl_sequential_await", 0.25, "16% slower than the baseline: fired -> passed", baseline="sl_steady_slow"
    ),
    ("step-time-regression", "alpha"): Probe(
        "sl_sequential_await", 1e-6, "p = 1.3e-5 is not significant at 1e-6: fired -> passed", baseline="sl_steady_slow"
    ),
    # quality-regression (against a baseline of the same recipe: fixtures/training/quality_*)
    ("quality-regression", "min_reward_drop"): Probe(
        "training/quality_rl_reward_drop",
        0.3,
        "eval reward 27% lower: fired -> passed",
        baseline="training/quality_rl_baseline",
    ),
    ("quality-regression", "alpha"): Probe(
        "training/quality_rl_reward_drop",
        1e-4,
        "p = 0.0011 is not significant at 1e-4: fired -> passed",
        baseline="training/quality_rl_baseline",
    ),
    ("quality-regression", "final_share"): Probe(
        "training/quality_rl_reward_drop",
        1.0,
        "the whole run instead of steps 35-46: the finding's window and statistics change",
        baseline="training/quality_rl_baseline",
    ),
    ("quality-regression", "min_points"): Probe(
        "training/quality_rl_reward_drop",
        13,
        "6 eval points: the eval reward is inconclusive and the training reward decides",
        baseline="training/quality_rl_baseline",
    ),
    ("quality-regression", "max_window_share"): Probe(
        "training/quality_sft_nll_rise",
        0.9,
        "the window widens to 6 test/nll evals: the eval NLL decides",
        baseline="training/quality_sft_baseline",
    ),
    ("quality-regression", "min_kl_rise"): Probe(
        "training/quality_rl_kl_rise",
        40.0,
        "KL 20-35x the baseline's: fired -> passed",
        baseline="training/quality_rl_baseline",
    ),
    ("quality-regression", "min_entropy_drop"): Probe(
        "training/quality_rl_entropy_collapse",
        0.8,
        "entropy 70% lower: fired -> passed",
        baseline="training/quality_rl_baseline",
    ),
    ("quality-regression", "min_loss_rise"): Probe(
        "training/quality_sft_nll_rise",
        0.2,
        "final train NLL 16% higher: fired -> passed",
        baseline="training/quality_sft_baseline",
    ),
    # environment-diff (against a baseline whose pip freeze has another tinker and numpy)
    ("environment-diff", "max_named"): Probe(
        "training/env_rl_sdk_regressed",
        1,
        "two differences named (tinker, numpy) -> only tinker, numpy counted as one more",
        baseline="training/env_rl_baseline",
    ),
    ("step-time-regression", "min_steady_steps"): Probe(
        "sl_sequential_await", 25, "24 steady steps: fired -> passed (inconclusive)", baseline="sl_steady_slow"
    ),
    # shared knobs, seen through a rule that reads them
    (SHARED, "clock_cycle_s"): Probe(
        "sl_steady_slow",
        0.05,
        "the trace gives no cycle; with one, the finding counts 3.4 cycles per step",
        observed_by="steady-slowness",
    ),
    (SHARED, "round_trip_stretch_ratio"): Probe(
        submit_blocked_while_sampling,
        3.0,
        "a 2.5x round trip no longer shows the SDK thread stalled too: fired -> passed",
        observed_by="gil-stall",
    ),
    (SHARED, "fb_optim_handoff_s"): Probe(
        "sl_sequential_await",
        0.2,
        "0.1 s fb->optim gaps are hand-offs: the fb->optim finding goes, the other stays",
        observed_by="pipelining-gap",
    ),
    (SHARED, "max_warmup_share"): Probe(
        "sl_warmup_only", 0.05, "the warm-up finding covers step 0 instead of steps 0-2", observed_by="warmup-slowness"
    ),
    (SHARED, "max_stable_kl"): Probe(
        "rl_kl_step0", 0.1, "step-0 KL 0.065 is inside the band: fired -> passed", observed_by="renderer-kl-step0"
    ),
    (SHARED, "sawtooth_min_periods"): Probe(
        "training/rl_sync_stale_sawtooth",
        10,
        "9 resets are fewer than 10 periods: fired -> not applicable",
        observed_by="stale-sampler",
    ),
    (SHARED, "sawtooth_min_drop"): Probe(
        "training/rl_sync_stale_sawtooth",
        30.0,
        "KL falls ~15x at each save, not 30x: fired -> passed",
        observed_by="stale-sampler",
    ),
    (SHARED, "sawtooth_min_share"): Probe(
        sawtooth_missing_a_tooth, 0.9, "3 of 4 saves reset the KL: fired -> passed", observed_by="stale-sampler"
    ),
    (SHARED, "overlap_min_steps"): Probe(
        _legacy_pipelined_sft(),
        100,
        "58 judged steps are too few: windows summed as written, get_batch 40% of each: passed -> fired",
        observed_by="get-batch-bottleneck",
    ),
    (SHARED, "overlap_min_fit_share"): Probe(
        _legacy_pipelined_sft(shortened_every=20),
        1.0,
        "3 of 58 windows written 0.5 s short: the reading fits 95%, not 100%: passed -> fired",
        observed_by="get-batch-bottleneck",
    ),
    (SHARED, "overlap_max_spread_ratio"): Probe(
        _legacy_pipelined_sft(),
        0.001,
        "the overlap residual's spread is ~7% of total - own's, above 0.1%: passed -> fired",
        observed_by="get-batch-bottleneck",
    ),
    (SHARED, "overlap_tolerance_s"): Probe(
        _legacy_pipelined_sft(shortened_every=5),
        1.0,
        "12 of 58 windows 0.5 s short fit within 1 s: windows de-overlapped: fired -> passed",
        observed_by="get-batch-bottleneck",
    ),
    (SHARED, "untimed_excess_factor"): Probe(
        legacy_sync_rl(12, untimed_s=60.0, train_s=40.0, slow={4: 100.0, 8: 100.0}),
        1.0,
        "two steps untimed 2.7x the typical are sampling within 3x (64% of the steps' time); capped at 1x their "
        "excess is unnamed: 59%",
        observed_by="steady-slowness",
    ),
    (SHARED, "sawtooth_min_correlation"): Probe(
        "training/rl_sync_stale_sawtooth",
        0.99,
        "ρ(KL, steps since save) 0.96: fired -> passed",
        observed_by="stale-sampler",
    ),
}

# Thresholds no realistic run can make matter (dead knobs): none at present. A field listed here has
# no probe, and test_every_threshold_has_a_probe fails (strict xfail) until it is read or removed.
DEAD: list[tuple[str, str]] = []

# --- running the rules ------------------------------------------------------------------------


@cache
def load(name: str) -> RunTables:
    """A committed fixture, loaded once per test session."""
    if "/" in name:
        return load_run(ROOT / "fixtures" / name)
    return load_run(fixture_run(name))


def run_of(probe: Probe) -> RunTables:
    return load(probe.run) if isinstance(probe.run, str) else probe.run()


def policy_for(key: tuple[str, str], probe: Probe) -> Policy:
    slug, name = key
    if slug == SHARED:
        return Policy.from_config(shared={name: probe.value})
    return Policy.from_config(rules={slug: {name: probe.value}})


def outcomes(probe: Probe, policy: Policy | None, select: list[str] | None = None) -> dict[str, tuple]:
    """slug -> (status, reason, findings as dicts) of every rule that ran."""
    run = run_of(probe)
    if probe.baseline is not None:
        result = analyze(run, baseline=load(probe.baseline), policy=policy, select=select)
        findings, rule_outcomes = result.findings, result.outcomes
    else:
        findings, rule_outcomes, _ = run_rules(run, select=select, policy=policy)
    return {o.rule: (o.status, o.reason, [f.to_dict() for f in findings if f.rule == o.rule]) for o in rule_outcomes}


def policy_class(slug: str) -> type:
    return SharedPolicy if slug == SHARED else rule_policies()[slug]


def all_thresholds() -> set[tuple[str, str]]:
    fields = {(slug, f.name) for slug, cls in rule_policies().items() for f in dataclasses.fields(cls)}
    return fields | {(SHARED, f.name) for f in dataclasses.fields(SharedPolicy)}


def default_of(key: tuple[str, str]) -> Any:
    slug, name = key
    return next(f.default for f in dataclasses.fields(policy_class(slug)) if f.name == name)


def _without_echoes(node: Any, echoes: tuple) -> Any:
    """`node` without the leaves that hold one of `echoes` (dict and list structure kept)."""
    if isinstance(node, dict):
        return {
            k: _without_echoes(v, echoes) for k, v in node.items() if isinstance(v, (dict, list)) or v not in echoes
        }
    if isinstance(node, list):
        return [_without_echoes(v, echoes) for v in node]
    return node


def decision(outcome: tuple, echoes: tuple) -> tuple:
    """What a rule decided: its status and findings, minus evidence fields that only echo a threshold's value.

    A knob a rule copies into its evidence but never compares with anything is still dead.
    """
    status, _reason, findings = outcome
    return status, [{**f, "evidence": _without_echoes(f.get("evidence"), echoes)} for f in findings]


def probe_id(key: tuple[str, str]) -> str:
    return ".".join(key)


RULE_PROBES = [key for key in PROBES if key[0] != SHARED]

# --- the tests --------------------------------------------------------------------------------


@pytest.mark.xfail(bool(DEAD), reason=f"dead knobs: {DEAD}", strict=True)
def test_every_threshold_has_a_probe():
    """PROBES covers exactly the fields of every rule policy and of the shared policy."""
    assert set(PROBES) == all_thresholds()


@pytest.mark.parametrize("key", list(PROBES), ids=probe_id)
def test_threshold_changes_its_rule(key):
    """Overriding the threshold (with a value in its allowed range) changes what its rule decides on the probe run:
    its status or its findings, beyond the evidence fields that merely repeat the threshold."""
    probe = PROBES[key]
    slug = probe.observed_by or key[0]
    before = outcomes(probe, None, select=[slug])[slug]
    after = outcomes(probe, policy_for(key, probe), select=[slug])[slug]
    assert "error" not in (before[0], after[0]), (before[:2], after[:2])
    echoes = (default_of(key), probe.value)
    assert decision(after, echoes) != decision(before, echoes), (
        f"{probe_id(key)} = {probe.value!r} changes nothing {slug} decides on {probe.run}: a dead knob"
    )


@pytest.mark.parametrize("key", RULE_PROBES, ids=probe_id)
def test_threshold_changes_only_its_rule(key):
    """Overriding a rule's threshold leaves every other rule's outcome as it was."""
    probe = PROBES[key]
    before = outcomes(probe, None)
    after = outcomes(probe, policy_for(key, probe))
    others = sorted(set(before) - {key[0]})
    assert others and set(after) == set(before)
    assert {s: after[s] for s in others} == {s: before[s] for s in others}
