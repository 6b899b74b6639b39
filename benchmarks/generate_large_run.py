"""Deterministic generator of a large traced RL run in the exact cookbook file formats.

    python benchmarks/generate_large_run.py OUT_DIR --steps 3000 --samples 64

Writes `trace_events.jsonl` (B/E/M lines as the cookbook TraceCollector writes them),
`metrics.jsonl`, `timing_spans.jsonl` and `config.json`. No sleeps: timestamps come from a
clock-cycle model of the Tinker service (a request submitted at t runs in the first cycle that
starts at or after t; its result arrives just after that cycle ends). Each step runs `--samples`
concurrent rollout tasks (`Task-<n>` tracks, each a `do_group_rollout_and_filter_constant_reward`
span around a `sample_async` call) and the main-track training spans. The same arguments always
produce the same bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_CYCLE_S = 2.0
TRAIN_CYCLE_S = 1.5
RESULT_LATENCY_S = 0.004
ORIGIN_S = 473.726495273  # perf_counter at process start, like the cookbook's example lines


def cycle_end(t: float, cycle: float) -> float:
    """End of the first cycle starting at or after t, plus the result latency."""
    return math.ceil(t / cycle - 1e-12) * cycle + cycle + RESULT_LATENCY_S


def fake_tid(track: str) -> int:
    # The writer uses hash(track) % 1_000_000; crc32 keeps that spread (and its collisions)
    # while staying identical from run to run.
    return zlib.crc32(track.encode()) % 1_000_000


@dataclass
class TraceWriter:
    """Emits events in emission order with the writer's thread_name/process_name metadata."""

    out: list[str] = field(default_factory=list)
    named: set[int] = field(default_factory=set)
    process_named: bool = False

    def event(self, name: str, ph: str, track: str, t: float, extra: dict | None = None) -> None:
        tid = fake_tid(track)
        args = {"track": track, "thread": "MainThread"}
        if extra:
            args.update(extra)
        ts = round(t * 1e6, 3)
        self.out.append(
            json.dumps({"name": name, "ph": ph, "pid": 0, "tid": tid, "ts": ts, "args": args, "cat": "async"})
        )
        if tid not in self.named:
            self.named.add(tid)
            self.out.append(
                json.dumps({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "ts": 0, "args": {"name": track}})
            )
        if not self.process_named:
            self.process_named = True
            self.out.append(
                json.dumps(
                    {
                        "name": "process_name",
                        "ph": "M",
                        "pid": 0,
                        "tid": 0,
                        "ts": 0,
                        "args": {"name": "MainThread Thread"},
                    }
                )
            )


def simulate_step(
    step: int, t0: float, samples: int, task_base: int, rng: random.Random, writer: TraceWriter
) -> tuple[float, list[dict], dict]:
    """One RL step: concurrent sampling, then the train step. Returns (end time, spans, metrics)."""
    events: list[tuple[float, int, str, str, str, dict | None]] = []
    seq = 0
    spans: list[dict] = []

    def span(name: str, track: str, start: float, end: float, extra: dict | None = None) -> None:
        nonlocal seq
        events.append((start, seq, name, "B", track, None))
        events.append((end, seq + 1, name, "E", track, extra))
        seq += 2
        spans.append({"name": name, "start": start, "end": end})

    ends = []
    for k in range(samples):
        track = f"Task-{task_base + k}"
        begin = t0 + 0.0004 + 0.00003 * k
        submit = begin + 0.00005 + rng.random() * 0.0002
        done = cycle_end(submit, SAMPLE_CYCLE_S) + rng.random() * 0.01
        finish = done + 0.0002 + rng.random() * 0.0005
        span("sample_async", track, submit, done)
        span("do_group_rollout_and_filter_constant_reward", track, begin, finish)
        ends.append(finish)
    sampling_end = max(ends) + 0.0001
    span("sampling", "main", t0, sampling_end)

    train_begin = sampling_end + 0.0002
    assemble_end = train_begin + 0.02 + rng.random() * 0.005
    fb_submit = assemble_end + 0.0003
    fb_done = cycle_end(fb_submit, TRAIN_CYCLE_S)
    optim_done = cycle_end(fb_done + 0.0001, TRAIN_CYCLE_S)
    train_end = optim_done + 0.0005
    span("assemble_training_data", "main", train_begin + 0.0001, assemble_end)
    span("prepare_minibatch", "main", train_begin + 0.00005, assemble_end + 0.0001)
    span("forward_backward", "main", fb_submit + 0.0001, fb_done)
    span("optim_step", "main", fb_done + 0.0001, optim_done)
    span("train_step", "main", fb_submit, train_end - 0.0002)
    span("do_train_step_and_get_sampling_client", "main", train_begin, train_end, {"step": step})

    # Emission order: by time, and at one instant parents open before children and close after.
    for t, _, name, ph, track, extra in sorted(events, key=lambda e: (e[0], e[1])):
        writer.event(name, ph, track, t, extra)

    total = train_end - t0
    sample_durations = [s["end"] - s["start"] for s in spans if s["name"] == "sample_async"]
    metrics = {
        "step": step,
        "progress/batch": step,
        "optim/lr": 4e-05,
        "env/all/reward/total": round(0.2 + 0.6 * (1 - math.exp(-step / 500)) + 0.05 * rng.random(), 6),
        "env/all/total_episodes": samples,
        "optim/kl_sample_train_v1": 0.001 + 0.0005 * rng.random(),
        "optim/kl_sample_train_v2": 0.001 + 0.0005 * rng.random(),
        "optim/entropy": 0.6 + 0.1 * rng.random(),
        "time/sampling": sampling_end - t0,
        "time/sample_async:total": sum(sample_durations),
        "time/sample_async:count": len(sample_durations),
        "time/sample_async:mean": sum(sample_durations) / len(sample_durations),
        "time/sample_async:max": max(sample_durations),
        "time/assemble_training_data": assemble_end - train_begin - 0.0001,
        "time/forward_backward": fb_done - fb_submit - 0.0001,
        "time/optim_step": optim_done - fb_done - 0.0001,
        "time/train_step": train_end - 0.0002 - fb_submit,
        "time/do_train_step_and_get_sampling_client": train_end - train_begin,
        "time/total": total,
    }
    return train_end + 0.0003, spans, metrics


def timing_line(step: int, spans: list[dict]) -> str:
    """The step's spans in completion order, wall times relative to the earliest start."""
    first = min(s["start"] for s in spans)
    ordered = sorted(spans, key=lambda s: s["end"])
    return json.dumps(
        {
            "step": step,
            "spans": [
                {
                    "name": s["name"],
                    "duration": s["end"] - s["start"],
                    "wall_start": s["start"] - first,
                    "wall_end": s["end"] - first,
                }
                for s in ordered
            ],
        }
    )


def config(steps: int, samples: int) -> dict:
    return {
        "learning_rate": 4e-05,
        "model_name": "Qwen/Qwen3-8B",
        "renderer_name": "qwen3",
        "log_path": "/home/user/tinker-runs/bench",
        "lora_rank": 32,
        "temperature": 1.0,
        "loss_fn": "importance_sampling",
        "kl_penalty_coef": 0.0,
        "enable_trace": True,
        "span_chart_every": 0,
        "async_config": None,
        "stream_minibatch_config": None,
        "dataset_builder": {"batch_size": samples, "group_size": 1, "renderer_name": "qwen3"},
        "eval_every": 0,
        "save_every": 0,
        "bench": {"steps": steps, "samples": samples},
    }


def generate(out: Path, steps: int, samples: int, seed: int = 0) -> None:
    """Write the four run files into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    writer = TraceWriter()
    writer.event("main", "B", "main", ORIGIN_S)
    writer.event("do_sync_training", "B", "main", ORIGIN_S + 0.0001)
    t = ORIGIN_S + 0.05
    task_base = 1
    with (
        open(out / "trace_events.jsonl", "w") as trace,
        open(out / "metrics.jsonl", "w") as metrics,
        open(out / "timing_spans.jsonl", "w") as timing,
    ):
        for step in range(steps):
            t, spans, row = simulate_step(step, t, samples, task_base, rng, writer)
            task_base += samples
            trace.write("\n".join(writer.out) + "\n")
            writer.out.clear()
            metrics.write(json.dumps(row) + "\n")
            timing.write(timing_line(step, spans) + "\n")
        # A healthy trace still ends with main/do_sync_training open: the writer's last flush is lost.
    (out / "config.json").write_text(json.dumps(config(steps, samples), indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    generate(args.out, args.steps, args.samples, args.seed)


if __name__ == "__main__":
    main()
