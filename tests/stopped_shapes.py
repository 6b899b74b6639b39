"""Stopped and finished runs in the shapes the cookbook's recipes write them, built as text (run-stopped tests).

Each builder writes one run folder: `metrics.jsonl` rows as each trainer logs its progress (SFT
`progress` = min((step + 1) / total, 1), DPO `progress` = step / total, RL and distillation
`progress/done_frac` = (step + 1) / batches; FORMATS.md 1.3), the `logs.log` lines of its launch (the
plan line each recipe logs, the legacy `Starting X` / `X took` phases, `Wrote metrics`), and, for the
console cases, the terminal capture a user keeps (`wandb/.../output.log`: coloured level names, the
traceback, a `Killed` line from the shell). The simulated-writer cases (a real trace collector and
metrics store killed mid-span) are in tests/test_run_stopped_shapes.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

SFT = "tinker_cookbook.supervised.train:432"
RL = "tinker_cookbook.rl.train:2620"
DISTILL = "tinker_cookbook.distillation.train_on_policy:489"
DPO = "tinker_cookbook.preference.train_dpo:552"
PHASE = "tinker_cookbook.utils.misc_utils"
ML_LOG = "tinker_cookbook.utils.ml_log:218"
SESSION = (
    "tinker.lib.public_interfaces.service_client:66 [INFO] "
    "ServiceClient initialized for session 5f0c2a55-1d2e-5b8a-9c41-7a3e2d9b0c11"
)
CONTEXT_ERROR = (
    "tinker.BadRequestError: Error code: 400 - {'detail': \"Prompt length plus max_tokens exceeds the model's "
    'context window: 30000 prompt tokens + 4096 max_tokens > 32768."}'
)
RL_PHASES = ("sample", "assemble_training_data", "train", "compute_kl_sample_train")


def _line(logger: str, message: str, *, colour: bool = False) -> str:
    level = "[\x1b[92mINFO\x1b[0m]" if colour else "[INFO]"
    return f"{logger} {level} {message}\n"


def _phase(name: str, seconds: float | None, *, colour: bool = False) -> str:
    start = _line(f"{PHASE}:20", f"Starting {name}", colour=colour)
    return (
        start if seconds is None else start + _line(f"{PHASE}:23", f"{name} took {seconds:.2f} seconds", colour=colour)
    )


def _rows(path: Path, rows: list[dict]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


def sft_row(step: int, total: int) -> dict:
    return {"step": step, "progress": min((step + 1) / total, 1.0), "time/total": 2.0, "train_mean_nll": 1.0}


def rl_row(step: int, batches: int) -> dict:
    return {"step": step, "progress/done_frac": (step + 1) / batches, "time/total": 30.0, "env/all/reward/total": 0.5}


def dpo_row(step: int, total: int) -> dict:
    return {"step": step, "progress": step / total, "time/total": 3.0, "dpo_loss": 0.6}


def distill_row(step: int) -> dict:
    # Distillation without its done_frac: the log's plan line is the only plan.
    return {"step": step, "time/total": 20.0, "teacher_kl": 0.1}


def rl_log(batches: int, logged: int, tail: str = "", *, colour: bool = False, plan: str | None = None) -> str:
    """An RL launch's log: the plan line, `logged` whole steps (legacy phases, `Wrote metrics`), then `tail`."""
    text = _line(ML_LOG, "Logging to: /runs/x", colour=colour) + SESSION + "\n"
    text += _line(RL, plan or f"Will train on {batches} batches", colour=colour)
    for _ in range(logged):
        text += "".join(_phase(name, 5.0, colour=colour) for name in RL_PHASES)
        text += _line(ML_LOG, "Wrote metrics to /runs/x/metrics.jsonl", colour=colour)
    return text + tail


def sft_log(total: int, logged: int, tail: str = "", *, colour: bool = False) -> str:
    text = _line(ML_LOG, "Logging to: /runs/x", colour=colour) + SESSION + "\n"
    text += _line(SFT, f"Training for {total} batches x 1 epochs = {total} steps", colour=colour)
    for _ in range(logged):
        text += _line(ML_LOG, "Wrote metrics to /runs/x/metrics.jsonl", colour=colour)
    return text + tail


TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 80, in <module>\n'
    "    asyncio.run(main())\n"
    '  File "/home/u/.venv/lib/python3.12/site-packages/tinker/lib/api_future_impl.py", line 120, in result\n'
    "    raise exc\n"
)
INTERRUPT = (
    "^CTraceback (most recent call last):\n"
    '  File "/home/u/train.py", line 80, in <module>\n'
    "    asyncio.run(main())\n"
    '  File "/usr/lib/python3.12/asyncio/runners.py", line 123, in run\n'
    "    raise KeyboardInterrupt()\n"
    "KeyboardInterrupt\n"
)
# What asyncio logs when Ctrl-C cancels the run and a task fails while the loop shuts down (the corpus'
# bash_codeforces run): CancelledError, then the KeyboardInterrupt, then the task's own error.
SHUTDOWN_CHAIN = (
    "asyncio:1879 [ERROR] unhandled exception during asyncio.run() shutdown\n"
    "task: <Task finished name='Task-51' coro=<run_eval() done> exception=ValueError('zip() argument 2 is shorter')>\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.13/asyncio/queues.py", line 186, in get\n'
    "    await getter\n"
    "asyncio.exceptions.CancelledError\n"
    "\n"
    "During handling of the above exception, another exception occurred:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.13/asyncio/runners.py", line 123, in run\n'
    "    raise KeyboardInterrupt()\n"
    "KeyboardInterrupt\n"
    "\n"
    "During handling of the above exception, another exception occurred:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/home/u/envs/inspect.py", line 350, in run_eval\n'
    "    for sample_id, reward in zip(sample_ids, rewards, strict=True):\n"
    "ValueError: zip() argument 2 is shorter than argument 1\n"
)


def _console(folder: Path, text: str) -> None:
    capture = folder / "wandb" / "run-20261127_000000-abc123" / "files"
    capture.mkdir(parents=True)
    (capture / "output.log").write_text(text, encoding="utf-8")


def _rl_folder(folder: Path, batches: int, logged: int, **config: object) -> None:
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B", **config}))
    _rows(folder / "metrics.jsonl", [rl_row(step, batches) for step in range(logged)])


def console_traceback(folder: Path) -> None:
    """SFT, 7 of 20 steps logged, the terminal ends with the SDK's non-retryable error raised."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    _rows(folder / "metrics.jsonl", [sft_row(step, 20) for step in range(7)])
    _console(folder, sft_log(20, 7, TRACEBACK + CONTEXT_ERROR + "\n", colour=True))


def console_keyboard_interrupt(folder: Path) -> None:
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    _rows(folder / "metrics.jsonl", [sft_row(step, 20) for step in range(7)])
    _console(folder, sft_log(20, 7, INTERRUPT, colour=True))


def console_killed(folder: Path) -> None:
    """RL, 5 of 40 steps logged, killed inside step 5's `train` (the shell prints `Killed`)."""
    _rl_folder(folder, 40, 5)
    tail = _phase("sample", 5.0, colour=True) + _phase("assemble_training_data", 1.0, colour=True)
    _console(folder, rl_log(40, 5, tail + _phase("train", None, colour=True) + "Killed\n", colour=True))


def console_oom(folder: Path) -> None:
    _rl_folder(folder, 40, 5)
    tail = _phase("sample", None, colour=True) + "Out of memory: Killed process 48121 (python)\n"
    _console(folder, rl_log(40, 5, tail, colour=True))


def console_ends_with_nothing(folder: Path) -> None:
    """RL, 5 of 40 steps, the capture ends inside step 5's sampling with no error and no `Killed`."""
    _rl_folder(folder, 40, 5)
    _console(folder, rl_log(40, 5, _phase("sample", None, colour=True), colour=True))


def shutdown_interrupt_chain(folder: Path) -> None:
    """RL, Ctrl-C in step 3's sampling; a task fails while asyncio shuts down (the corpus' bash_codeforces)."""
    _rl_folder(folder, 40, 3)
    (folder / "logs.log").write_text(rl_log(40, 3, _phase("sample", None) + SHUTDOWN_CHAIN))
    # The W&B capture of an earlier launch that crashed on its own: not part of this shutdown.
    _console(folder, _line(ML_LOG, "Logging to: /runs/x", colour=True) + TRACEBACK + CONTEXT_ERROR + "\n")


def step0_in_evals(folder: Path) -> None:
    """RL, the launch never logged a step: it stopped in step 0's `run_evals`."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    tail = _phase("save_checkpoint", 2.0) + _phase("run_evals", None)
    (folder / "logs.log").write_text(rl_log(57, 0, tail))


def distill_completed(folder: Path) -> None:
    """On-policy distillation logs `Will train on N batches (dataset has N)`; all 12 logged."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    _rows(folder / "metrics.jsonl", [distill_row(step) for step in range(12)])
    (folder / "logs.log").write_text(rl_log(12, 12, plan="Will train on 12 batches (dataset has 12)"))


def distill_stopped(folder: Path) -> None:
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    _rows(folder / "metrics.jsonl", [distill_row(step) for step in range(5)])
    (folder / "logs.log").write_text(rl_log(30, 5, plan="Will train on 30 batches (dataset has 30)"))


def dpo_completed(folder: Path) -> None:
    """DPO writes `progress` before the step (step / total): its last row is (total - 1) / total."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    _rows(folder / "metrics.jsonl", [dpo_row(step, 20) for step in range(20)])
    (folder / "logs.log").write_text(_line(DPO, "Training for 10 batches x 2 epochs = 20 steps"))


def dpo_max_steps(folder: Path) -> None:
    """DPO capped by config max_steps 8 below its 20 planned steps: complete at 8."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B", "max_steps": 8}))
    _rows(folder / "metrics.jsonl", [dpo_row(step, 20) for step in range(8)])
    (folder / "logs.log").write_text(_line(DPO, "Training for 10 batches x 2 epochs = 20 steps"))


def rl_max_steps(folder: Path) -> None:
    """RL 0.6.1: done_frac counts the dataset's 100 batches, `Will train on 10 batches` has max_steps applied."""
    _rl_folder(folder, 100, 10, max_steps=10)
    (folder / "logs.log").write_text(rl_log(10, 10))


def resumed_then_killed(folder: Path) -> None:
    """RL resumed from its step-10 checkpoint (the store moved the rows >= 10 to a `.pre_resume_` backup),
    then killed inside step 16's train; 30 planned."""
    _rl_folder(folder, 30, 10)
    _rows(folder / "metrics.jsonl.pre_resume_000010", [rl_row(step, 30) for step in range(14)])
    _rows(folder / "metrics.jsonl", [rl_row(step, 30) for step in range(10, 16)])
    first = rl_log(30, 14, _phase("sample", None))
    second = rl_log(30, 6, _phase("sample", 5.0) + _phase("train", None))
    (folder / "logs.log").write_text(first + second)


def resumed_completed(folder: Path) -> None:
    _rl_folder(folder, 30, 10)
    _rows(folder / "metrics.jsonl.pre_resume_000010", [rl_row(step, 30) for step in range(14)])
    _rows(folder / "metrics.jsonl", [rl_row(step, 30) for step in range(10, 30)])
    (folder / "logs.log").write_text(rl_log(30, 14, _phase("sample", None)) + rl_log(30, 20))


def short_healthy_no_plan(folder: Path) -> None:
    """Five SFT steps with no plan anywhere (no progress key, no plan line, no max_steps)."""
    _rows(folder / "metrics.jsonl", [{"step": step, "time/total": 2.0, "train_mean_nll": 1.0} for step in range(5)])


# --- second audit: console-only captures, terminal stop reports, plans from elsewhere, resumes, sweeps ---


# rl/train.py gather_with_progress: tqdm(total=len(groups), desc=f"Sampling batch {i_batch}") on stderr,
# each redraw a carriage return with no newline until the bar closes.
def _tqdm(desc: str, done: int, total: int) -> str:
    bars = []
    for n in range(done + 1):
        filled = "█" * (10 * n // total)
        bars.append(
            f"\r{desc}: {100 * n // total:3d}%|{filled:<10}| {n}/{total} [00:{n:02d}<00:{total - n:02d},  1.00s/it]"
        )
    return "".join(bars)


def metrics_table(step: int, row: dict) -> str:
    """PrettyPrintLogger.log_metrics: the row rendered by rich (keys sorted, floats with 6 decimals) and
    logged as one record whose message starts with a newline."""
    import io

    from rich.console import Console
    from rich.table import Table

    items = sorted((k, v) for k, v in row.items() if k != "step")
    table = Table(show_header=True, header_style="bold magenta", title=f"Step {step}")
    table.add_column("Metric", style="cyan", width=min(max(max(len(k) for k, _ in items), 20), 60))
    table.add_column("Value", style="green")
    for key, value in items:
        table.add_row(key, f"{value:.6f}" if isinstance(value, float) else str(value))
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(table)
    return f"{ML_LOG.split(':')[0]}:195 [INFO] \n" + out.getvalue().rstrip() + "\n"


def _rl_console(batches: int, logged: int) -> str:
    """An RL launch's console as `python train.py 2>&1 | tee` keeps it: per step the sampling bar, the
    legacy phases, `Wrote metrics` and the step's table."""
    text = _line(ML_LOG, "Logging to: /runs/x") + SESSION + "\n" + _line(RL, f"Will train on {batches} batches")
    for step in range(logged):
        text += _tqdm(f"Sampling batch {step}", 8, 8) + "\n"
        text += "".join(_phase(name, 5.0) for name in RL_PHASES[1:])
        text += _line(ML_LOG, "Wrote metrics to /runs/x/metrics.jsonl") + metrics_table(step, rl_row(step, batches))
    return text


def console_only_tqdm_killed(folder: Path) -> None:
    """Only a tee'd console (no metrics.jsonl, no config): 6 of 40 RL steps printed, then step 6's sampling
    bar at 3/8 with no newline: the file just ends there."""
    (folder / "train.out").write_text(_rl_console(40, 6) + _tqdm("Sampling batch 6", 3, 8), encoding="utf-8")


def console_only_slurm_time_limit(folder: Path) -> None:
    """A slurm job's output file: 6 of 40 steps, step 6's sampling bar, then slurmstepd's cancel line."""
    cancel = "slurmstepd: error: *** JOB 4121 ON node07 CANCELLED AT 2026-11-27T03:12:44 DUE TO TIME LIMIT ***\n"
    (folder / "slurm-4121.out").write_text(_rl_console(40, 6) + _tqdm("Sampling batch 6", 3, 8) + "\n" + cancel)


def console_terminated(folder: Path) -> None:
    """bash's report of a SIGTERM'd foreground job (a `kill PID`, a scheduler's preemption notice)."""
    _rl_folder(folder, 40, 5)
    tail = _phase("sample", None, colour=True) + "Terminated\n"
    _console(folder, rl_log(40, 5, tail, colour=True))


def console_killed_9(folder: Path) -> None:
    """zsh on macOS reports a SIGKILLed job as `zsh: killed     python train.py` (bash: `Killed: 9` on
    macOS' /bin/sh)."""
    _rl_folder(folder, 40, 5)
    tail = _phase("sample", None, colour=True) + "zsh: killed     python -m tinker_cookbook.recipes.math_rl.train\n"
    _console(folder, rl_log(40, 5, tail, colour=True))


def console_cuda_oom(folder: Path) -> None:
    """The user's own GPU reward model runs out of memory in step 5's sampling: torch's error ends it."""
    _rl_folder(folder, 40, 5)
    oom = (
        TRACEBACK.replace("tinker/lib/api_future_impl.py", "torch/nn/modules/module.py").replace(
            "raise exc", "return forward_call(*args, **kwargs)"
        )
        + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "23.55 GiB of which 1.12 GiB is free.\n"
    )
    _console(folder, rl_log(40, 5, _phase("sample", None, colour=True) + oom, colour=True))


def console_bare_keyboard_interrupt(folder: Path) -> None:
    """Ctrl-C caught by a user's `except KeyboardInterrupt: print("KeyboardInterrupt")`-less script that
    exits in asyncio's runner: the terminal shows `^C` and the bare exception name, no traceback."""
    _rl_folder(folder, 40, 5)
    _console(folder, rl_log(40, 5, _phase("sample", None, colour=True) + "^C\nKeyboardInterrupt\n", colour=True))


def completed_without_progress_key(folder: Path) -> None:
    """An older SFT run: the plan line, every planned step logged, no `progress` key in the rows."""
    _rows(folder / "metrics.jsonl", [{"step": s, "time/total": 2.0, "train_mean_nll": 1.0} for s in range(20)])
    (folder / "logs.log").write_text(
        sft_log(20, 20) + _line(SFT.split(":")[0] + ":630", "Training completed successfully")
    )


def completed_final_checkpoint_no_plan(folder: Path) -> None:
    """No plan line, no progress key, a final checkpoint: the run ended on its own."""
    _rows(folder / "metrics.jsonl", [{"step": s, "time/total": 2.0, "train_mean_nll": 1.0} for s in range(12)])
    with open(folder / "checkpoints.jsonl", "w", encoding="utf-8") as f:
        f.write(
            json.dumps({"name": "000010", "batch": 10, "epoch": 0, "state_path": "tinker://r/weights/000010"}) + "\n"
        )
        f.write(json.dumps({"name": "final", "batch": 12, "epoch": 0, "state_path": "tinker://r/weights/final"}) + "\n")


def legacy_resume_then_killed(folder: Path) -> None:
    """<=0.5.x resume: one metrics.jsonl with steps 0-13, then 10-17 (the relaunch re-runs from its
    checkpoint 10); each launch starts with `Command line invocation:`; killed inside step 18's train."""
    _rl_folder(folder, 40, 14)
    _rows(folder / "metrics.jsonl", [rl_row(step, 40) for step in range(10, 18)])
    launch = _line("root:1", "Command line invocation: python -m tinker_cookbook.recipes.math_rl.train")
    first = launch + rl_log(40, 14, _phase("sample", None))
    second = launch + rl_log(
        40, 8, _phase("sample", 5.0) + _phase("assemble_training_data", 1.0) + _phase("train", None)
    )
    (folder / "logs.log").write_text(first + second)


def heartbeat_hang_in_sampling(folder: Path) -> None:
    """RL hung in step 5's `Starting sample` while the SDK's heartbeat thread kept warning (its count
    growing), the process alive for at least 19 minutes past its last phase line."""
    _rl_folder(folder, 40, 5)
    session = SESSION.rsplit(" ", 1)[-1]
    warnings = "".join(
        "tinker.lib.internal_client_holder:212 [WARNING] "
        f"Session heartbeat failed for {secs:.1f} seconds for session {session}. Last exception: "
        "APITimeoutError('Request timed out.').\n"
        "Your connection may be unreliable or Tinker is down. If this persists, the session will be terminated.\n"
        for secs in (130.2, 370.9, 611.4, 851.7, 1092.0)
    )
    (folder / "logs.log").write_text(rl_log(40, 5, _phase("sample", None) + warnings))


def stopped_in_final_eval(folder: Path) -> None:
    """Sync RL logged all 20 training rows; killed in the final `run_evals` (the eval-only row at
    step == end_batch never came, nor the final checkpoint)."""
    _rl_folder(folder, 20, 20)
    (folder / "logs.log").write_text(rl_log(20, 20, _phase("run_evals", None)))


def plan_in_config_only(folder: Path) -> None:
    """No plan line and no progress key (an older RL run), config.json says max_steps 40: the 12 rows are
    short of an upper bound only; the console ends inside step 12's train."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B", "max_steps": 40}))
    _rows(folder / "metrics.jsonl", [{"step": s, "time/total": 30.0, "env/all/reward/total": 0.5} for s in range(12)])
    (folder / "logs.log").write_text(
        rl_log(40, 12, _phase("sample", 5.0) + _phase("train", None)).replace(_line(RL, "Will train on 40 batches"), "")
    )


def half_written_last_row(folder: Path) -> None:
    """SFT 9 of 30 rows whole, the 10th cut mid-append (SIGKILL during the write); no log."""
    _rows(folder / "metrics.jsonl", [sft_row(step, 30) for step in range(9)])
    with open(folder / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(sft_row(9, 30))[:37])


def interleaved_launches(folder: Path) -> None:
    """Two processes launched with one log_path write one logs.log at once (line by line interleaved):
    the second's `Command line invocation` comes while the first is mid-run."""
    _rl_folder(folder, 40, 8)
    launch = _line("root:1", "Command line invocation: python -m tinker_cookbook.recipes.math_rl.train")
    a = (launch + rl_log(40, 8, _phase("sample", None))).splitlines(True)
    b = (launch + rl_log(40, 3, _phase("sample", None))).splitlines(True)
    merged = (
        a[:20] + [line for pair in zip(a[20:], b, strict=False) for line in pair] + a[20 + len(b) :] + b[len(a) - 20 :]
    )
    (folder / "logs.log").write_text("".join(merged))


def sweep_one_stopped(folder: Path) -> None:
    """A sweep folder: three RL runs of 20 steps, lr-2e-5 killed in step 7's train."""
    for name, logged, tail in (
        ("lr-1e-5", 20, ""),
        ("lr-2e-5", 7, _phase("sample", 5.0) + _phase("train", None)),
        ("lr-4e-5", 20, ""),
    ):
        run = folder / name
        run.mkdir()
        _rl_folder(run, 20, logged)
        (run / "logs.log").write_text(rl_log(20, logged, tail))


def timestamped_log(folder: Path) -> None:
    """A user's own logging format (`%(asctime)s %(levelname)s %(name)s: %(message)s`) in place of the
    cookbook's: 5 of 40 RL steps, killed inside step 5's sampling. No line is in the cookbook's layout."""
    _rl_folder(folder, 40, 5)
    text = ""
    for i, line in enumerate(rl_log(40, 5, _phase("sample", None)).splitlines()):
        logger, _, rest = line.partition(" [")
        level, _, message = rest.partition("] ")
        text += f"2026-11-27 03:{i // 60:02d}:{i % 60:02d},120 {level} {logger.split(':')[0]}: {message}\n"
    (folder / "logs.log").write_text(text)


def _arithmetic(folder: Path, logged: int) -> None:
    """math_rl's arithmetic builder takes its length as `n_batches` (its dataset's __len__); rows without a
    progress key (an RL version before done_frac), no log kept."""
    builder = {"batch_size": 8, "group_size": 4, "n_batches": 30, "renderer_name": "qwen3"}
    config = {"model_name": "Qwen/Qwen3-8B", "dataset_builder": builder, "num_epochs": 1}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    _rows(
        folder / "metrics.jsonl", [{"step": s, "time/total": 30.0, "env/all/reward/total": 0.5} for s in range(logged)]
    )


def plan_from_config_n_batches(folder: Path) -> None:
    _arithmetic(folder, 12)


def completed_by_config_n_batches(folder: Path) -> None:
    _arithmetic(folder, 30)


CASES: dict[str, Callable[[Path], None]] = {
    name: builder
    for name, builder in globals().items()
    if callable(builder)
    and getattr(builder, "__module__", None) == __name__
    and name not in ("sft_row", "rl_row", "dpo_row", "distill_row", "rl_log", "sft_log", "metrics_table")
    and not name.startswith("_")
}


def unreported_kill(finding) -> bool:
    """Whether run-stopped read files that end mid-step with no kill reported after them: kind `killed`,
    `kill_reported` false (titled 'killed or hung': a kill and a run stuck there read the same)."""
    return finding.evidence["kind"] == "killed" and not finding.evidence["kill_reported"]


def run_stopped(path: Path) -> tuple:
    """(run-stopped's finding or None, its outcome, the whole analysis) of the run folder `path`."""
    from trace_doctor.api import analyze, load_run

    result = analyze(load_run(str(path)))
    found = [f for f in result.findings if f.rule == "run-stopped"]
    outcome = next(o for o in result.outcomes if o.rule == "run-stopped")
    return (found[0] if found else None), outcome, result


def built(tmp_path: Path, cases: dict[str, Callable[[Path], None]], name: str) -> Path:
    """The folder `tmp_path/name` holding the case `name` of `cases`, as its builder writes it."""
    folder = tmp_path / name
    folder.mkdir()
    cases[name](folder)
    return folder
