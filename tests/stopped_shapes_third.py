"""Stopped and finished runs for run-stopped's third audit: how other tools print a run's end.

Each builder writes one run folder in the cookbook's layout (stopped_shapes.py's rows and log lines), ending
the way a tool outside the trainer reports it: rich's boxed traceback (`rich.traceback.install()`), a
capture with Windows line endings, Python's faulthandler dump of a native crash, a py-spy dump saved beside
a hung run, the tinker SDK's errors raised at the end (429, 500, a lost connection, the stuck-request
detector), a container's or the kernel cgroup's kill report, GNU timeout's signal, a kill during start-up,
W&B's end-of-run summary after a clean end and after a traceback, a NaN-loss assert, and a sweep of a
crash, a hang and a completed run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from stopped_shapes import (
    CONTEXT_ERROR,
    ML_LOG,
    RL,
    SESSION,
    SFT,
    TRACEBACK,
    _console,
    _line,
    _phase,
    _rl_folder,
    _rows,
    dpo_row,
    rl_log,
    sft_log,
    sft_row,
)

SESSION_ID = SESSION.rsplit(" ", 1)[-1]

# rich.traceback.install(): the frames in a box, the exception's class name (no module) and message after it.
RICH_TRACEBACK = (
    "╭───────────────────── Traceback (most recent call last) ──────────────────────╮\n"
    "│ /home/u/train.py:80 in <module>                                              │\n"
    "│                                                                              │\n"
    "│   79 │                                                                       │\n"
    "│ ❱ 80 │   asyncio.run(main())                                                 │\n"
    "│   81                                                                         │\n"
    "│                                                                              │\n"
    "│ /home/u/.venv/lib/python3.12/site-packages/tinker/lib/api_future_impl.py:120 │\n"
    "│ in result                                                                    │\n"
    "│                                                                              │\n"
    "│   119 │   │   if exc is not None:                                            │\n"
    "│ ❱ 120 │   │   │   raise exc                                                  │\n"
    "╰──────────────────────────────────────────────────────────────────────────────╯\n"
)
# Python's faulthandler (`python -X faulthandler`, or PYTHONFAULTHANDLER=1) on SIGSEGV: every thread's frames,
# innermost first, `File "...", line N in func` (no comma), then the shell's report.
FAULTHANDLER = (
    "Fatal Python error: Segmentation fault\n"
    "\n"
    "Thread 0x00007f1e2b7fe700 (most recent call first):\n"
    '  File "/usr/lib/python3.12/selectors.py", line 468 in select\n'
    '  File "/usr/lib/python3.12/asyncio/base_events.py", line 1949 in _run_once\n'
    '  File "/home/u/.venv/lib/python3.12/site-packages/tinker/lib/internal_client_holder.py", line 98 in _run\n'
    '  File "/usr/lib/python3.12/threading.py", line 1010 in run\n'
    "\n"
    "Current thread 0x00007f1e3c4b1740 (most recent call first):\n"
    '  File "/home/u/.venv/lib/python3.12/site-packages/torch/nn/functional.py", line 2264 in embedding\n'
    '  File "/home/u/reward_model.py", line 41 in score\n'
    '  File "/home/u/env.py", line 77 in step\n'
    '  File "/home/u/train.py", line 80 in <module>\n'
    "\n"
    "Extension modules: numpy.core._multiarray_umath, torch._C, pydantic_core._pydantic_core (total: 42)\n"
    "Segmentation fault (core dumped)\n"
)
# wandb.finish() at exit: the run's history and summary, the link, the folder.
WANDB_SUMMARY = (
    "wandb: \n"
    "wandb: Run history:\n"
    "wandb:   env/all/reward/total ▁▂▃▅▆█\n"
    "wandb:             time/total █▂▁▁▁▁\n"
    "wandb: \n"
    "wandb: Run summary:\n"
    "wandb:   env/all/reward/total 0.5\n"
    "wandb:             time/total 30.0\n"
    "wandb: \n"
    "wandb: 🚀 View run lr-2e-5 at: https://wandb.ai/u/rl/runs/abc123\n"
    "wandb: ⭐️ View project at: https://wandb.ai/u/rl\n"
    "wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)\n"
    "wandb: Find logs at: ./wandb/run-20261127_000000-abc123/logs\n"
)


def _sdk_error(kind: str, message: str) -> str:
    """The cookbook's log record of an error raised out of the SDK, its traceback and the final line."""
    return TRACEBACK + f"tinker.{kind}: {message}\n"


def rich_traceback_crash(folder: Path) -> None:
    """SFT, 7 of 20 steps; the user's script installs rich's traceback handler: the context-window error in
    a box (ANSI colours stripped, as W&B's capture keeps them when stdout is not a TTY)."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    _rows(folder / "metrics.jsonl", [sft_row(step, 20) for step in range(7)])
    final = CONTEXT_ERROR.replace("tinker.BadRequestError", "BadRequestError")
    _console(folder, sft_log(20, 7, RICH_TRACEBACK + final + "\n", colour=True))


def rich_traceback_nan(folder: Path) -> None:
    """RL, 12 of 40 steps; rich's traceback of the user's NaN guard in step 12's training (colour codes kept
    around the exception's name, as rich writes them to a terminal captured with `script`)."""
    _rl_folder(folder, 40, 12)
    final = "\x1b[1;91mValueError: \x1b[0mLoss is NaN at step 12 (lr=4e-4); stopping\n"
    tail = _phase("sample", 5.0) + _phase("train", None)
    _console(folder, rl_log(40, 12, tail + RICH_TRACEBACK + final, colour=True))


def crlf_console_traceback(folder: Path) -> None:
    """The context-window crash of stopped_shapes.console_traceback, captured on Windows (CRLF endings)."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    _rows(folder / "metrics.jsonl", [sft_row(step, 20) for step in range(7)])
    text = sft_log(20, 7, _phase("train", None, colour=True) + TRACEBACK + CONTEXT_ERROR + "\n", colour=True)
    capture = folder / "train.log"
    capture.write_bytes(text.replace("\n", "\r\n").encode("utf-8"))


def crlf_console_killed(folder: Path) -> None:
    """RL, 5 of 40 steps, CRLF capture, killed in step 5's train (bash's `Killed`)."""
    _rl_folder(folder, 40, 5)
    text = rl_log(40, 5, _phase("sample", 5.0) + _phase("train", None) + "Killed\n")
    (folder / "train.log").write_bytes(text.replace("\n", "\r\n").encode("utf-8"))


def faulthandler_segfault(folder: Path) -> None:
    """RL, 9 of 40 steps; the user's reward model segfaults inside step 9's sampling: faulthandler's dump of
    every thread, then the shell's `Segmentation fault (core dumped)`."""
    _rl_folder(folder, 40, 9)
    _console(folder, rl_log(40, 9, _phase("sample", None, colour=True) + FAULTHANDLER, colour=True))


def faulthandler_abort(folder: Path) -> None:
    """The same, a C++ abort (`Fatal Python error: Aborted`), no shell line after it (the capture's pipe)."""
    _rl_folder(folder, 40, 9)
    dump = FAULTHANDLER.replace("Segmentation fault", "Aborted").replace("Aborted (core dumped)\n", "")
    _console(folder, rl_log(40, 9, _phase("sample", None, colour=True) + dump, colour=True))


def shell_segfault_only(folder: Path) -> None:
    """No faulthandler (the default): a batch script's bash reports the SIGSEGV after step 9's sampling began."""
    _rl_folder(folder, 40, 9)
    report = (
        "/var/spool/slurmd/job4121/slurm_script: line 3: 48121 Segmentation fault      (core dumped) python train.py\n"
    )
    (folder / "slurm-4121.out").write_text(rl_log(40, 9, _phase("sample", None) + report))


def faulthandler_watchdog_hang(folder: Path) -> None:
    """`faulthandler.dump_traceback_later(600, repeat=True)`: a live process's thread dump (`Timeout (0:10:00)!`)
    while step 5's sampling hung, no `Fatal Python error`; then the capture just ends."""
    _rl_folder(folder, 40, 5)
    dump = FAULTHANDLER.split("Thread 0x", 1)[1].split("Extension modules", 1)[0]
    _console(folder, rl_log(40, 5, _phase("sample", None) + "Timeout (0:10:00)!\nThread 0x" + dump))


def pyspy_dump_hang(folder: Path) -> None:
    """RL, 5 of 40 steps, the log stops at `Starting sample`; the user saved `py-spy dump --pid` beside it:
    the main thread is in the user's reward function, the SDK thread idle in its loop."""
    _rl_folder(folder, 40, 5)
    (folder / "logs.log").write_text(rl_log(40, 5, _phase("sample", None)))
    (folder / "py-spy-dump.txt").write_text(
        "Process 48121: python -m tinker_cookbook.recipes.math_rl.train\n"
        "Python v3.12.3 (/usr/bin/python3.12)\n"
        "\n"
        'Thread 48121 (active): "MainThread"\n'
        "    score (reward.py:212)\n"
        "    compute_reward (env.py:77)\n"
        "    step (env.py:60)\n"
        "    do_single_rollout (tinker_cookbook/rl/rollouts.py:41)\n"
        "    _run_once (asyncio/base_events.py:1987)\n"
        "    run_forever (asyncio/base_events.py:641)\n"
        "    <module> (train.py:80)\n"
        'Thread 48170 (idle): "Thread-1 (_run_loop)"\n'
        "    select (selectors.py:468)\n"
        "    _run_once (asyncio/base_events.py:1949)\n"
        "    run_forever (asyncio/base_events.py:641)\n"
        "    _bootstrap (threading.py:1030)\n"
    )


def pyspy_dump_in_sdk(folder: Path) -> None:
    """The same, the main thread blocked in the SDK's `.result()` (threading's wait inside it) in step 5's train."""
    _rl_folder(folder, 40, 5)
    (folder / "logs.log").write_text(rl_log(40, 5, _phase("sample", 5.0) + _phase("train", None)))
    (folder / "py-spy-dump.txt").write_text(
        'Thread 0x7F3A5C8F9740 (idle): "MainThread"\n'
        "    wait (threading.py:355)\n"
        "    result (concurrent/futures/_base.py:451)\n"
        "    result (tinker/lib/public_interfaces/api_future.py:132)\n"
        "    train_step (train.py:50)\n"
        "    <module> (train.py:80)\n"
    )


def faulthandler_watchdog_in_sdk(folder: Path) -> None:
    """The watchdog's dump with the main thread blocked in the SDK's `.result()` in step 5's train."""
    _rl_folder(folder, 40, 5)
    dump = (
        "Timeout (0:30:00)!\n"
        "Thread 0x00007f1e2b7fe700 (most recent call first):\n"
        '  File "/usr/lib/python3.12/selectors.py", line 468 in select\n'
        '  File "/usr/lib/python3.12/asyncio/base_events.py", line 1949 in _run_once\n'
        '  File "/home/u/.venv/lib/python3.12/site-packages/tinker/lib/internal_client_holder.py", line 98 in _run\n'
        "\n"
        "Thread 0x00007f1e3c4b1740 (most recent call first):\n"
        '  File "/usr/lib/python3.12/threading.py", line 355 in wait\n'
        '  File "/usr/lib/python3.12/concurrent/futures/_base.py", line 451 in result\n'
        '  File "/home/u/.venv/lib/python3.12/site-packages/tinker/lib/public_interfaces/api_future.py", line 132 in '
        "result\n"
        '  File "/home/u/train.py", line 50 in train_step\n'
        '  File "/home/u/train.py", line 80 in <module>\n'
    )
    _console(folder, rl_log(40, 5, _phase("sample", 5.0) + _phase("train", None) + dump))


def faulthandler_watchdog_then_progress(folder: Path) -> None:
    """The watchdog fired in step 3's sampling, the run went on, and the capture ends inside step 8's train with
    nothing after it: the dump is of a state the run left, not where it stopped."""
    _rl_folder(folder, 40, 8)
    dump = "Timeout (0:10:00)!\nThread 0x" + FAULTHANDLER.split("Thread 0x", 1)[1].split("Extension modules", 1)[0]
    first = rl_log(
        40,
        3,
        _phase("sample", None) + dump + _line("tinker_cookbook.utils.misc_utils:23", "sample took 700.00 seconds"),
    )
    rest = "".join(_phase(name, 5.0) for name in ("assemble_training_data", "train", "compute_kl_sample_train"))
    rest += _line(ML_LOG, "Wrote metrics to /runs/x/metrics.jsonl")
    for _ in range(4):
        rest += "".join(
            _phase(name, 5.0) for name in ("sample", "assemble_training_data", "train", "compute_kl_sample_train")
        )
        rest += _line(ML_LOG, "Wrote metrics to /runs/x/metrics.jsonl")
    _console(folder, first + rest + _phase("sample", 5.0) + _phase("train", None))


def exception_group_crash(folder: Path) -> None:
    """Python 3.11+: the user's rollouts run in an asyncio.TaskGroup; one raises the context-window error in step
    5's sampling and the group's traceback (bordered, the sub-exception numbered) ends the capture."""
    _rl_folder(folder, 40, 5)
    group = (
        "  + Exception Group Traceback (most recent call last):\n"
        '  |   File "/home/u/train.py", line 80, in <module>\n'
        "  |     asyncio.run(main())\n"
        '  |   File "/home/u/rollouts.py", line 31, in sample_all\n'
        "  |     async with asyncio.TaskGroup() as tg:\n"
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
        "  +-+---------------- 1 ----------------\n"
        "    | Traceback (most recent call last):\n"
        '    |   File "/home/u/rollouts.py", line 40, in one\n'
        "    |     await client.sample_async(prompt, 1, params)\n"
        f"    | {CONTEXT_ERROR}\n"
        "    +------------------------------------\n"
    )
    _console(folder, rl_log(40, 5, _phase("sample", None, colour=True) + group, colour=True))


def loguru_traceback_crash(folder: Path) -> None:
    """The user's script logs with loguru and wraps main in `@logger.catch`: its traceback marks the catching
    frame with `> File` and annotates values with `│ └` lines."""
    _rl_folder(folder, 40, 5)
    caught = (
        "2026-11-27 03:12:44.123 | ERROR    | __main__:<module>:80 - An error has been caught in function "
        "'<module>', process 'MainProcess' (48121), thread 'MainThread' (140)::\n"
        "Traceback (most recent call last):\n"
        "\n"
        '> File "/home/u/train.py", line 80, in <module>\n'
        "    asyncio.run(main())\n"
        "    │       │   └ <function main at 0x7f3a5c8f9740>\n"
        "    │       └ <function run at 0x7f3a5d0e1ee0>\n"
        "    └ <module 'asyncio' from '/usr/lib/python3.12/asyncio/__init__.py'>\n"
        "\n"
        '  File "/home/u/.venv/lib/python3.12/site-packages/tinker/lib/api_future_impl.py", line 120, in result\n'
        "    raise exc\n"
        "\n"
        f"{CONTEXT_ERROR}\n"
    )
    _console(folder, rl_log(40, 5, _phase("sample", None, colour=True) + caught, colour=True))


def ipython_traceback_crash(folder: Path) -> None:
    """SFT run from a notebook cell, its output saved as text: IPython's traceback of the context-window error."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    _rows(folder / "metrics.jsonl", [sft_row(step, 20) for step in range(7)])
    cell = (
        "---------------------------------------------------------------------------\n"
        "BadRequestError                           Traceback (most recent call last)\n"
        "Cell In[12], line 3\n"
        "      1 config = build_config()\n"
        "----> 3 await main(config)\n"
        "\n"
        "File ~/.venv/lib/python3.12/site-packages/tinker/lib/api_future_impl.py:120, in _APIFuture.result(self)\n"
        "    118 if exc is not None:\n"
        "--> 120     raise exc\n"
        "\n"
        f"{CONTEXT_ERROR.replace('tinker.BadRequestError', 'BadRequestError')}\n"
    )
    (folder / "notebook_output.txt").write_text(sft_log(20, 7, _phase("train", None) + cell))


def _sdk_crash(folder: Path, kind: str, message: str, retries: int = 0) -> None:
    _rl_folder(folder, 40, 5)
    retry = "".join(
        _line("tinker.lib.retry_handler:160", f"Request attempt #{n} failed with status 429") for n in range(retries)
    )
    tail = _phase("sample", 5.0) + _phase("train", None) + retry + _sdk_error(kind, message)
    (folder / "logs.log").write_text(rl_log(40, 5, tail))


def sdk_rate_limited(folder: Path) -> None:
    _sdk_crash(folder, "RateLimitError", "Error code: 429 - {'detail': 'Too many concurrent requests'}", retries=3)


def sdk_internal_server_error(folder: Path) -> None:
    _sdk_crash(folder, "InternalServerError", "Error code: 500 - {'detail': 'Internal server error'}")


def sdk_connection_error(folder: Path) -> None:
    _sdk_crash(folder, "APIConnectionError", "Connection error.")


def sdk_stuck_requests(folder: Path) -> None:
    _sdk_crash(folder, "APIConnectionError", "No progress made in 7200.0s. Requests appear to be stuck.")


def _killed_with(folder: Path, report: str) -> None:
    """RL, 5 of 40 steps, killed inside step 5's train; `report` is what the capture ends with."""
    _rl_folder(folder, 40, 5)
    _console(folder, rl_log(40, 5, _phase("sample", 5.0) + _phase("train", None) + report))


def cgroup_oom(folder: Path) -> None:
    _killed_with(folder, "Memory cgroup out of memory: Killed process 48121 (python) total-vm:81234567kB\n")


def exit_code_137(folder: Path) -> None:
    _killed_with(folder, "ERROR: Job 1 failed with return code list: [137]\n")


def container_oomkilled(folder: Path) -> None:
    _killed_with(folder, "Container trainer terminated: OOMKilled (exit code 137)\n")


def gnu_timeout_term(folder: Path) -> None:
    _killed_with(folder, "timeout: sending signal TERM to command ‘python’\n")


def startup_killed(folder: Path) -> None:
    """Killed while it loaded the tokenizer and built the dataset: config.json, the launch's first lines,
    no metrics file, no phase line."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B", "max_steps": 40}))
    text = _line(ML_LOG, "Logging to: /runs/x") + SESSION + "\n" + "Killed\n"
    (folder / "logs.log").write_text(text)


def startup_silent(folder: Path) -> None:
    """The same launch's first lines, nothing after: still starting up, or stopped; the files cannot say."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B", "max_steps": 40}))
    (folder / "logs.log").write_text(_line(ML_LOG, "Logging to: /runs/x") + SESSION + "\n")


def wandb_summary_completed(folder: Path) -> None:
    """A console-only capture of a whole RL run (its plan line, every step), then W&B's summary."""
    _rl_folder(folder, 8, 8)
    _console(folder, rl_log(8, 8, _line(RL.split(":")[0] + ":2700", "Training completed successfully") + WANDB_SUMMARY))


def wandb_summary_after_traceback(folder: Path) -> None:
    """wandb.finish() runs at exit after a crash too: its summary follows the traceback."""
    _rl_folder(folder, 40, 5)
    tail = _phase("sample", 5.0) + _phase("train", None) + TRACEBACK + CONTEXT_ERROR + "\n" + WANDB_SUMMARY
    _console(folder, rl_log(40, 5, tail))


def wandb_summary_after_kill(folder: Path) -> None:
    """A SIGTERM: W&B's handler still prints its summary, the run was cut mid-step."""
    _rl_folder(folder, 40, 5)
    _console(folder, rl_log(40, 5, _phase("sample", None) + "Terminated\n" + WANDB_SUMMARY))


def sft_metrics_only_killed(folder: Path) -> None:
    """SFT, metrics and config only (no log kept), 37 of 120 steps: `progress` says the plan."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B", "num_epochs": 3}))
    _rows(folder / "metrics.jsonl", [sft_row(step, 120) for step in range(37)])


def dpo_metrics_only_killed(folder: Path) -> None:
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B", "num_epochs": 2}))
    _rows(folder / "metrics.jsonl", [dpo_row(step, 60) for step in range(23)])


def sweep_crash_hang_done(folder: Path) -> None:
    """A sweep folder: lr-1e-5 completed, lr-2e-5 crashed with a 500, lr-4e-5 hung in sampling while the SDK's
    heartbeat warnings went on."""
    done, crashed, hung = folder / "lr-1e-5", folder / "lr-2e-5", folder / "lr-4e-5"
    for run in (done, crashed, hung):
        run.mkdir()
    _rl_folder(done, 20, 20)
    (done / "logs.log").write_text(rl_log(20, 20))
    _rl_folder(crashed, 20, 7)
    tail = _phase("sample", 5.0) + _phase("train", None)
    (crashed / "logs.log").write_text(
        rl_log(20, 7, tail + _sdk_error("InternalServerError", "Error code: 500 - {'detail': 'Internal error'}"))
    )
    _rl_folder(hung, 20, 4)
    warnings = "".join(
        "tinker.lib.internal_client_holder:212 [WARNING] "
        f"Session heartbeat failed for {secs:.1f} seconds for session {SESSION_ID}. Last exception: "
        "APITimeoutError('Request timed out.').\n"
        "Your connection may be unreliable or Tinker is down. If this persists, the session will be terminated.\n"
        for secs in (130.2, 370.9, 611.4, 851.7, 1092.0)
    )
    (hung / "logs.log").write_text(rl_log(20, 4, _phase("sample", None) + warnings))


def sft_eval_after_last_row(folder: Path) -> None:
    """SFT logged its 20 planned rows, then the capture ends inside the final checkpoint's save (no final
    checkpoint in checkpoints.jsonl)."""
    (folder / "config.json").write_text(json.dumps({"model_name": "Qwen/Qwen3-8B"}))
    _rows(folder / "metrics.jsonl", [sft_row(step, 20) for step in range(20)])
    (folder / "logs.log").write_text(sft_log(20, 20, _phase("save_checkpoint", None)))
    _ = SFT


CASES: dict[str, Callable[[Path], None]] = {
    name: builder
    for name, builder in globals().items()
    if callable(builder)
    and getattr(builder, "__module__", None) == __name__
    and not name.startswith("_")
    and name not in ("rl_log", "sft_log", "sft_row", "dpo_row")
}
