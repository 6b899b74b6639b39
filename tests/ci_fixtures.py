"""Small cookbook-format runs and hand-built analyses for the CI-gate, format, bundle and export tests.

Log directories follow ../shared/FORMATS.md: legacy SFT metrics rows with `time/total`,
Chrome-trace B/E/M lines as the cookbook TraceCollector writes them, logs.log records, config.json.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl

from trace_doctor.decision import decide
from trace_doctor.model import (
    SPANS_SCHEMA,
    STEPS_SCHEMA,
    Analysis,
    BaselineComparison,
    Finding,
    InputFile,
    RuleOutcome,
    RunMeta,
    RunTables,
)

# Planted secrets: none of these bytes may appear in an escalation bundle.
SECRETS = {
    "tinker": "tml-PLANTEDtinkerKEY0123456789abcdef",
    "openai": "sk-proj-PLANTEDopenai0123456789",
    "hf": "hf_PLANTEDhuggingface0123456789",
    "bearer": "PLANTEDbearer.eyJhbGciOi.0123456789",
    "wandb": "0123456789abcdefPLANTED0123456789abcdef"[:40],
    "password": "PLANTED-hunter2-password",
}


def step_times(
    n: int, steady_s: float, *, warmup: int = 1, warmup_s: float | None = None, seed: int = 0
) -> list[float]:
    """Per-step wall times: a slow warm-up, then steady steps with ±3% deterministic noise."""
    rng = random.Random(seed)
    first = warmup_s if warmup_s is not None else steady_s * 6
    return [first if i < warmup else steady_s * (1 + rng.uniform(-0.03, 0.03)) for i in range(n)]


def write_sl_run(
    root: Path,
    totals: list[float],
    *,
    get_batch_share: float = 0.1,
    trace: bool = True,
    sequential: bool = False,
    secrets: bool = False,
) -> Path:
    """A legacy-era SFT log dir: metrics with time/total and parts, config, logs, checkpoints, trace."""
    root.mkdir(parents=True, exist_ok=True)
    config = {
        "log_path": str(root),
        "model_name": "Qwen/Qwen3-8B",
        "renderer_name": "qwen3",
        "learning_rate": 1e-4,
        "lora_rank": 32,
        "enable_trace": trace,
        "submit_ahead": 0 if sequential else 1,
        "max_tokens": 1024,
        "session_name": "ci-session-7",
        "dataset_builder": {"common_config": {"batch_size": 128, "max_length": 4096}},
    }
    if secrets:
        config["api_key"] = SECRETS["tinker"]
        config["wandb"] = {"api_key": SECRETS["wandb"], "project": "demo"}
        config["hf_token"] = SECRETS["hf"]
        config["db_password"] = SECRETS["password"]
        config["notes"] = f"launched with TINKER_API_KEY={SECRETS['tinker']} and OPENAI_API_KEY={SECRETS['openai']}"
    (root / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")

    rows = []
    for step, total in enumerate(totals):
        get_batch = total * get_batch_share
        rows.append(
            json.dumps(
                {
                    "step": step,
                    "epoch": 0,
                    "progress": (step + 1) / len(totals),
                    "learning_rate": 1e-4,
                    "num_sequences": 128,
                    "num_tokens": 300000,
                    "train_mean_nll": 0.9 - step * 0.001,
                    "time/get_batch": round(get_batch, 6),
                    "time/step": round(total * 0.8, 6),
                    "time/total": round(total, 6),
                }
            )
        )
    (root / "metrics.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")

    log = [
        "root:120 [INFO] Command line invocation: python -m tinker_cookbook.recipes.sl_basic",
        "tinker.lib.public_interfaces.service_client:88 [INFO] ServiceClient initialized for session "
        "sess-4f2a9c10-77aa",
        "tinker.lib.public_interfaces.service_client:97 [INFO] TrainingClient initialized for model model-31337",
        f"tinker_cookbook.supervised.train:210 [INFO] Training for {len(totals)} batches x 1 epochs = "
        f"{len(totals)} steps",
    ]
    if secrets:
        log += [
            f"root:121 [INFO] env: TINKER_API_KEY={SECRETS['tinker']}",
            f"httpx:33 [WARNING] request headers: Authorization: Bearer {SECRETS['bearer']}",
            f"wandb.sdk:12 [INFO] WANDB_API_KEY={SECRETS['wandb']} HF_TOKEN={SECRETS['hf']}",
            "openai._base_client:44 [ERROR] Request failed with non-retryable error: AuthenticationError: "
            f"bad key {SECRETS['openai']}",
        ]
    (root / "logs.log").write_text("\n".join(log) + "\n", encoding="utf-8")
    (root / "checkpoints.jsonl").write_text(
        json.dumps(
            {
                "name": "000002",
                "batch": 2,
                "epoch": 0,
                "state_path": "tinker://run-abc123/weights/000002",
                "sampler_path": "tinker://run-abc123/sampler_weights/000002",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    if trace:
        (root / "trace_events.jsonl").write_text(
            "\n".join(json.dumps(e) for e in trace_events(totals, sequential=sequential)) + "\n", encoding="utf-8"
        )
    return root


def trace_events(totals: list[float], *, sequential: bool) -> list[dict]:
    """Cookbook TraceCollector lines for an SFT loop: main task with get_batch / submit / finish spans."""
    events: list[dict] = []
    main_tid = 481227

    def span(name: str, start: float, end: float, tid: int = main_tid, track: str = "main", step: int | None = None):
        base = {"pid": 0, "tid": tid, "args": {"track": track, "thread": "MainThread"}, "cat": "async"}
        events.append({"name": name, "ph": "B", "ts": start, **base})
        end_args = dict(base["args"], **({"step": step} if step is not None else {}))
        events.append({"name": name, "ph": "E", "ts": end, **{**base, "args": end_args}})

    events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": main_tid, "ts": 0, "args": {"name": "main"}})
    events.append(
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "ts": 0, "args": {"name": "MainThread Thread"}}
    )
    t = 473726495.273
    begin = t
    inner = []
    for step, total in enumerate(totals):
        us = total * 1e6
        get_batch = us * 0.1
        inner.append(("get_batch", t, t + get_batch, None))
        submit_end = t + get_batch + us * 0.05
        inner.append(("submit_batch", t + get_batch, submit_end, step))
        inner.append(("forward_backward_async", t + get_batch + 10, t + get_batch + 2000, None))
        inner.append(("train/fwd_bwd_substep_0_mb_0_enqueue", t + get_batch + 2100, t + get_batch + 2500, step))
        inner.append(("finish_batch", submit_end, t + us - 50, step))
        inner.append(("train/fwd_bwd_substep_0_mb_0_consume", submit_end + 100, submit_end + 900, step))
        t += us
    span("main", begin, t + 10)
    for name, start, end, step in inner:
        span(name, start, end, step=step)
    # A second thread: the default executor runs a data-processing span (fake pid 1).
    events.append(
        {
            "name": "data_processing",
            "ph": "B",
            "pid": 1,
            "tid": 765726,
            "ts": begin + 500,
            "args": {"track": "sync:asyncio_0", "thread": "asyncio_0"},
            "cat": "async",
        }
    )
    events.append(
        {
            "name": "data_processing",
            "ph": "E",
            "pid": 1,
            "tid": 765726,
            "ts": begin + 90500,
            "args": {"track": "sync:asyncio_0", "thread": "asyncio_0"},
            "cat": "async",
        }
    )
    return events


def hand_analysis(*, with_baseline: bool = False, fail_on: str = "never") -> Analysis:
    """An Analysis built directly from tables: spans on two threads, three findings, rule outcomes."""
    spans = pl.DataFrame(
        {
            "name": [
                "main",
                "submit_batch",
                "forward_backward_async",
                "fwd_enqueue",
                "finish_batch",
                "fwd_consume",
                "data_processing",
                "sample_async",
            ],
            "pid": [0, 0, 0, 0, 0, 0, 1, 0],
            "tid": [11, 11, 11, 11, 11, 11, 22, 33],
            "thread": ["MainThread"] * 6 + ["asyncio_0", "MainThread"],
            "track": ["main"] * 6 + ["sync:asyncio_0", "sample_task_0"],
            "start_us": [0.0, 100.0, 110.0, 150.0, 400.0, 420.0, 50.0, 10.0],
            "end_us": [1000.0, 300.0, 140.0, 190.0, 900.0, 480.0, 250.0, None],
            "dur_us": [1000.0, 200.0, 30.0, 40.0, 500.0, 60.0, 200.0, None],
            "depth": [0, 1, 2, 2, 1, 2, 0, 0],
            "step": [None, 0, 0, 0, 0, 0, None, None],
            "segment": [0] * 8,
            "closed": [True] * 7 + [False],
            "args": ['{"track": "main"}'] * 8,
        },
        schema=SPANS_SCHEMA,
    )
    steps = pl.DataFrame(
        {
            "step": [0, 1, 2],
            "segment": [0, 0, 0],
            "line": [1, 2, 3],
            "source": ["run/metrics.jsonl"] * 3,
            "superseded": [False] * 3,
            "is_eval_row": [False] * 3,
            "time/total": [1.0, 0.5, 0.5],
        },
        schema={**STEPS_SCHEMA, "time/total": pl.Float64},
    )
    run = RunTables(meta=RunMeta(path="run", trainer="sl", model_name="Qwen/Qwen3-8B"), steps=steps, spans=spans)
    run.inputs = [InputFile("metrics", "run/metrics.jsonl", 3, 0), InputFile("trace", "run/trace_events.jsonl", 16, 0)]
    findings = [
        Finding(
            rule="pipelining-gap",
            code="TD101",
            severity="warning",
            title="Calls awaited one by one",
            message="forward_backward result awaited before optim_step was submitted in 3 of 3 steps <b>",
            fix="Submit ahead.",
            steps=[0, 1, 2],
            time_ranges_us=[[100.0, 300.0], [150.0, 500.0]],
            evidence={"steps": [{"path": "run/metrics.jsonl", "line": 2}], "idle_share": 0.4},
            seconds_lost=1.5,
            fraction_of_wall=0.3,
            fingerprint="pipelining-gap:main",
        ),
        Finding(
            rule="warmup-slowness",
            code="TD103",
            severity="info",
            title="Slow first step",
            message="step 0 took 2x the steady median",
            fix="Nothing to do.",
            steps=[0],
            evidence={"log_lines": [{"path": "run/logs.log", "line": 7}]},
            fingerprint="warmup-slowness",
        ),
        Finding(
            rule="decoded-error",
            code="TD302",
            severity="error",
            title="Context window exceeded",
            message="prompt + max_tokens > context window | 8 times",
            fix="Shorten prompts.",
            steps=[1],
            evidence={},
            fingerprint="decoded-error:context-window",
        ),
    ]
    findings.sort(key=Finding.sort_key)
    outcomes = [
        RuleOutcome("pipelining-gap", "fired", "1 finding(s)"),
        RuleOutcome("get-batch-bottleneck", "passed", "get_batch is 3% of steady step time"),
        RuleOutcome("warmup-slowness", "fired", "1 finding(s)"),
        RuleOutcome("gil-stall", "not_applicable", "no dumps, no GIL-monitor lines"),
        RuleOutcome("kl-drift", "error", "ValueError: boom (at kl_drift.py:12)"),
        RuleOutcome("decoded-error", "fired", "1 finding(s)"),
    ]
    baseline = None
    if with_baseline:
        baseline = {
            "path": "base",
            "verdict": "regression",
            "message": "median steady step time 0.5 -> 0.65 s (+30.0%)",
            "statistics": {
                "u": 100.0,
                "p": 0.0001,
                "effect": 0.3,
                "n_baseline": 10,
                "n_candidate": 10,
                "median_baseline": 0.5,
                "median_candidate": 0.65,
                "unit": "s",
                "metric": "steady step time",
            },
            "breakdown": [
                {"phase": "waits", "baseline_s": 0.3, "candidate_s": 0.42, "change_s": 0.12, "share_of_change": 0.8},
                {
                    "phase": "other/interaction",
                    "baseline_s": None,
                    "candidate_s": None,
                    "change_s": 0.03,
                    "share_of_change": 0.2,
                },
            ],
            "structural": {},
            "new_fingerprints": ["decoded-error:context-window"],
        }
    summary = {"wall_time_s": 2.0, "step_time_p50_s": 0.5, "steady_step_time_s": 0.5, "warmup_steps": 1}
    comparison = BaselineComparison.from_dict(baseline) if baseline is not None else None
    result = Analysis(run=run, findings=findings, outcomes=outcomes, summary=summary, baseline=comparison)
    return decide(result, fail_on=fail_on)
