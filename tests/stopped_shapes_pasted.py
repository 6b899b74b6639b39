"""Stopped runs as real users pasted them (run-stopped's fourth audit): each builder reproduces the line shapes of
one public report (cited above it: an issue URL or a corpus path), in a run folder such a user has (a console
capture only, or the cookbook's log_path with its metrics). Where the report's text was cut, the rest is the
cookbook's or the SDK's own line for that place (tests/stopped_shapes.py), said so in the comment.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stopped_shapes import _phase, _rl_folder, rl_log

PHASE = "tinker_cookbook.utils.misc_utils"

# github.com/thinking-machines-lab/tinker-cookbook/issues/354: the custom environment's trajectory printout,
# then the phases, and the log stops on `Starting train` for hours (the user's own words).
TRAJECTORY_END = "====== End Trajectory Group ======\n"


def hours_on_starting_train(folder: Path) -> None:
    """issues/354: RL, 6 of 30 steps logged; step 6's trajectories printed, `assemble_training_data` done, then
    `Starting train` is the last line."""
    _rl_folder(folder, 30, 6)
    tail = (
        _phase("sample", 41.0)
        + "====== Trajectory Group 3 ======\nQuestion: who wrote ...\nReward: 0.0\n"
        + TRAJECTORY_END
        + f"{PHASE}:20 [INFO] Starting assemble_training_data\n"
        + f"{PHASE}:23 [INFO] assemble_training_data took 1.07 seconds\n"
        + f"{PHASE}:20 [INFO] Starting train\n"
    )
    (folder / "logs.log").write_text(rl_log(30, 6, tail))


# github.com/thinking-machines-lab/tinker-cookbook/issues/372 (wusche1's run 1): `save_checkpoint took`, the next
# step's phases, `Starting kl_vs_base`, then the SDK's retry handler gives up on a sample; "the process doesn't
# terminate cleanly — it hangs indefinitely after the error". The error text is the issue's title.
EXHAUSTED = (
    "tinker.lib.retry_handler:241 [ERROR] Request failed with non-retryable error: RequestFailedError: "
    "Request failed: Unknown error: Failed to sample after exhausting retries.\n"
)


def error_then_hang_in_kl_vs_base(folder: Path) -> None:
    """issues/372: RL, 7 of 20 steps logged, the retry handler's ERROR inside step 7's `kl_vs_base`, no traceback."""
    _rl_folder(folder, 20, 7)
    tail = (
        f"{PHASE}:23 [INFO] save_checkpoint took 14.03 seconds\n"
        + _phase("sample", 30.0)
        + f"{PHASE}:20 [INFO] Starting assemble_training_data\n"
        + f"{PHASE}:23 [INFO] assemble_training_data took 0.12 seconds\n"
        + f"{PHASE}:20 [INFO] Starting kl_vs_base\n"
        + EXHAUSTED
    )
    (folder / "logs.log").write_text(rl_log(20, 7, tail))


# github.com/thinking-machines-lab/tinker-cookbook/issues/147 (Error 1): a log viewer's copy puts each line's
# time on a line of its own before it (`2025-12-03 02:45:45`, then the line). The frames are the issue's; its
# final line was cut from the excerpt, so it is the SDK's stuck-request error (FORMATS.md 5.4).
STUCK_FINAL = "tinker.APIConnectionError: No progress made in 7200.0s. Requests appear to be stuck."
VIEWER_TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/mnt/disk_3/u/tinker-cookbook/tinker_cookbook/rl/train.py", line 774, in '
    "do_train_step_and_get_sampling_client",
    "    data_D, prepare_minibatch_metrics, original_data = await prepare_minibatch(",
    "                                                       ^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/mnt/disk_3/u/tinker-cookbook/tinker_cookbook/utils/trace.py", line 332, in async_wrapper',
    "    return await func(*args, **kwargs)",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/mnt/disk_3/u/tinker-cookbook/tinker_cookbook/rl/train.py", line 683, in prepare_minibatch',
    "    current_logprobs_D = await asyncio.gather(",
    "                         ^^^^^^^^^^^^^^^^^^^^^",
    '  File "/mnt/disk_3/u/tinker-cookbook/.venv/lib/python3.11/site-packages/tinker/lib/public_interfaces/'
    'sampling_client.py", line 227, in compute_logprobs_async',
    "    return await AwaitableConcurrentFuture(self.compute_logprobs(prompt))",
    STUCK_FINAL,
)


def _viewer(lines: list[str], stamps: list[str]) -> str:
    return "".join(f"{stamp}\n{line}\n" for stamp, line in zip(stamps, lines, strict=True))


def viewer_stamped_traceback(folder: Path) -> None:
    """issues/147: RL, 12 of 50 steps; the console as the viewer copies it (a time line before every line), the
    phases of step 12, then the traceback of the stuck logprobs request."""
    _rl_folder(folder, 50, 12)
    body = rl_log(50, 12, _phase("sample", 30.0) + _phase("train", None)).splitlines()
    lines = [*body, *VIEWER_TRACEBACK]
    stamps = ["2025-12-03 00:45:40"] * len(body) + ["2025-12-03 02:45:45"] * len(VIEWER_TRACEBACK)
    (folder / "console.log").write_text(_viewer(lines, stamps))


# github.com/thinking-machines-lab/tinker-feedback/issues/80: "during the fwd bwd process" the SDK's base client
# logs its retries of a 500, and the run goes no further (the issue's line, repeated as the client retries).
RETRY_500 = (
    'tinker._base_client:734 [WARNING] Retrying due to status code 500. text={"error":"Internal Server Error",'
    '"message":"An unexpected error occurred. Log ID: 9cdccedb-a784-43ad-91b7-d4b08db08be2"}\n'
)


def retrying_500_in_train(folder: Path) -> None:
    """tinker-feedback/80: RL, 9 of 40 steps; step 9's `train` open, then the 500 retries are the last lines."""
    _rl_folder(folder, 40, 9)
    tail = _phase("sample", 30.0) + _phase("assemble_training_data", 1.0) + _phase("train", None)
    (folder / "logs.log").write_text(rl_log(40, 9, tail + RETRY_500 * 6))


# github.com/thinking-machines-lab/tinker-cookbook/issues/652: a manual SFT loop (forward_backward_async and
# optim_step_async) in a Kaggle notebook, 98% through; the SDK's queue logger says training is paused for
# capacity ("Been waiting for 2hours"). With no logging set up, Python's last-resort handler prints a warning's
# message alone, as the issue quotes it.
PAUSED = (
    "Training for 4f0c2a55-1d2e-5b8a-9c41-7a3e2d9b0c11:train:0 is paused. "
    "Reason: Tinker backend is running short on capacity, please wait.\n"
)


def notebook_paused_for_capacity(folder: Path) -> None:
    """cookbook/652: a notebook's printed progress (`step 490/500 loss ...`), then the paused warning, once a minute."""
    lines = "".join(f"step {s}/500 loss {1.0 / (s + 1):.4f}\n" for s in range(480, 491))
    (folder / "notebook_output.txt").write_text(lines + PAUSED * 120)


# github.com/hafs-community/HAFS/issues/101 (failure log 1): the cgroup OOM kill as slurm reports it when a
# step, not the whole job, is cancelled (`*** STEP N.0 ON node CANCELLED AT ... ***`), with srun's own lines.
SLURM_STEP_OOM = (
    "slurmstepd: error: Detected 1 oom-kill event(s) in step 3495064.0 cgroup. Some of your processes may have "
    "been killed by the cgroup out-of-memory handler.\n"
    "srun: error: Orion-01-01: task 4: Out Of Memory\n"
    "srun: Terminating job step 3495064.0\n"
    "slurmstepd: error: *** STEP 3495064.0 ON orion-01-01 CANCELLED AT 2021-10-27T19:35:36 ***\n"
)
# The same issue's failure log 2: srun reports a task's crash signal, then cancels the step.
SLURM_STEP_BUS_ERROR = (
    "srun: error: Orion-18-69: task 289: Bus error\n"
    "srun: Terminating job step 3495450.0\n"
    "slurmstepd: error: *** STEP 3495450.0 ON orion-01-04 CANCELLED AT 2021-10-27T20:22:22 ***\n"
)


def srun_step_oom(folder: Path) -> None:
    """HAFS/101: RL launched with `srun` in a batch script; step 8's sampling; the step's OOM kill and cancel."""
    _rl_folder(folder, 40, 8)
    (folder / "slurm-3495064.out").write_text(rl_log(40, 8, _phase("sample", None) + SLURM_STEP_OOM))


def srun_step_bus_error(folder: Path) -> None:
    """HAFS/101: the same launch, srun reports the task's bus error inside step 8's sampling."""
    _rl_folder(folder, 40, 8)
    (folder / "slurm-3495450.out").write_text(rl_log(40, 8, _phase("sample", None) + SLURM_STEP_BUS_ERROR))


# github.com/ArjunaCluster/ArjunaUsers/issues/52: the interactive terminal pasted as it was: the progress prints,
# `Killed`, then the shell's prompt; the batch job's stderr has bash's report with the command and slurmstepd's
# cgroup OOM line.
PROMPT = "(abnn) mingzeya@c002:~/CGCNN_project/AbNN_benchmark/hform/case1    $ \n"


def killed_then_prompt(folder: Path) -> None:
    """ArjunaUsers/52: a console-only capture of 6 of 40 RL steps; `Killed` in step 6's sampling, the prompt after."""
    (folder / "terminal.txt").write_text(rl_log(40, 6, _phase("sample", None) + "Killed\n" + PROMPT))


def batch_stderr_oom(folder: Path) -> None:
    """ArjunaUsers/52 (the batch job): bash's `line 28:  8156 Killed   python3 ...`, then the cgroup OOM line."""
    _rl_folder(folder, 40, 6)
    report = (
        "/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 -m "
        "tinker_cookbook.recipes.math_rl.train model_name=Qwen/Qwen3-8B\n"
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may "
        "have been killed by the cgroup out-of-memory handler.\n"
    )
    (folder / "slurm-191.out").write_text(rl_log(40, 6, _phase("sample", None) + report))


# kubernetes.io `kubectl logs --timestamps` (and `docker logs -t`): every line behind its RFC 3339 time with
# nanoseconds. The pod's run hung in step 5's train with the SDK's heartbeat warnings going on (FORMATS.md 5.4).
def _k8s(lines: list[str], start_s: int, every_s: int) -> str:
    out = []
    for i, line in enumerate(lines):
        t = start_s + i * every_s
        out.append(f"2026-03-05T{t // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d}.123456789Z {line}\n")
    return "".join(out)


HEARTBEAT = (
    "tinker.lib.internal_client_holder:412 [WARNING] Session heartbeat failed for {secs} seconds for session "
    "5f0c2a55-1d2e-5b8a-9c41-7a3e2d9b0c11. Last exception: ReadTimeout."
)


def pod_log_hung_in_train(folder: Path) -> None:
    """`kubectl logs --timestamps`: RL, 5 of 40 steps; step 5's `train` begins at 10:00, then only heartbeat
    warnings for two hours (the pod was still there when the log was taken)."""
    _rl_folder(folder, 40, 5)
    body = rl_log(40, 5, _phase("sample", 5.0) + _phase("train", None)).splitlines()
    warnings = [HEARTBEAT.format(secs=130 + 600 * i) for i in range(12)]
    (folder / "pod.log").write_text(_k8s(body, 32400, 1) + _k8s(warnings, 36000 + 130, 600))


def pod_log_killed_in_train(folder: Path) -> None:
    """The same pod log ending right at step 5's `Starting train`: nothing after it, the pod gone (OOMKilled in
    `kubectl describe`, which the log does not hold)."""
    _rl_folder(folder, 40, 5)
    body = rl_log(40, 5, _phase("sample", 5.0) + _phase("train", None)).splitlines()
    (folder / "pod.log").write_text(_k8s(body, 32400, 1))


# rich's traceback handler (github.com/Textualize/rich, rich/traceback.py) yields the final `Type: message` line to
# the console after the box, so the console word-wraps it at its width, the box's (80 columns when the output is
# not a terminal, as in W&B's output.log or `| tee`): a long message goes on over several lines.
def _rich_box(frames: list[str], width: int = 80) -> str:
    title = " Traceback (most recent call last) "
    left = (width - 2 - len(title)) // 2
    top = "╭" + "─" * left + title + "─" * (width - 2 - len(title) - left) + "╮"
    rows = ["│ " + frame.ljust(width - 4) + " │" for frame in frames]
    return "\n".join([top, *rows, "╰" + "─" * (width - 2) + "╯"]) + "\n"


def _rich_final(text: str, width: int = 80) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)) + "\n"


RICH_FRAMES = [
    "/home/u/train.py:80 in <module>",
    "",
    "❱ 80 │   asyncio.run(main())",
    "",
    "/home/u/.venv/lib/python3.12/site-packages/tinker/lib/api_future_impl.py:120",
    "in result",
]
CONTEXT_400 = (
    "BadRequestError: Error code: 400 - {'detail': \"Prompt length plus max_tokens exceeds the model's context "
    'window: 30000 prompt tokens + 4096 max_tokens > 32768."}'
)


def rich_wrapped_final_line(folder: Path) -> None:
    """RL, 7 of 20 steps; rich's box, then the context-window error wrapped over three 80-column lines (its
    'context window' words on the second), then W&B's closing line."""
    _rl_folder(folder, 20, 7)
    tail = _phase("sample", None) + _rich_box(RICH_FRAMES) + _rich_final(CONTEXT_400)
    (folder / "output.log").write_text(
        rl_log(20, 7, tail) + "wandb: 🚀 View run rl-7 at: https://wandb.ai/u/rl/runs/x\n"
    )


# github.com/thinking-machines-lab/tinker-cookbook/issues/234: the user's CUA agent logs the SDK's stuck-request
# error for one rollout with its traceback (the frames are the issue's; its final line, cut from the excerpt, is
# the error the record names), and the training goes on with the other rollouts.
CAUGHT_STUCK = (
    "tinker_cookbook.recipes.cua_rl.tinker_cua_agent:919 [ERROR] [Task End] ✗ Task failed with exception: No "
    "progress made in 7200s. Requests appear to be stuck.\n"
    "Traceback (most recent call last):\n"
    '  File "/home/ubuntu/tinker-cookbook/.venv/lib/python3.12/site-packages/tinker/lib/retry_handler.py", line 136, '
    "in execute\n"
    "    result = await self._execute_with_retry(func, *args, **kwargs)\n"
    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/home/ubuntu/tinker-cookbook/.venv/lib/python3.12/site-packages/tinker/lib/api_future_impl.py", line '
    "274, in result_async\n"
    "    return await asyncio.wait_for(self._future, timeout)\n"
    "tinker.APIConnectionError: No progress made in 7200s. Requests appear to be stuck.\n"
)


def caught_stuck_rollout_then_killed(folder: Path) -> None:
    """cookbook/234: RL, 3 of 20 steps; one rollout of step 3 fails with the stuck-request error, step 3 goes on to
    `train`, and the capture ends inside it with bash's `Killed`."""
    _rl_folder(folder, 20, 3)
    tail = _phase("sample", None) + CAUGHT_STUCK + _phase("sample", 7300.0).split("\n", 1)[1]
    tail += _phase("assemble_training_data", 1.0) + _phase("train", None) + "Killed\n"
    (folder / "logs.log").write_text(rl_log(20, 3, tail))


# Python's default logging layout: `logging.basicConfig(level=logging.INFO)` with no format, as the cookbook's own
# eval/run_inspect_evals.py and recipes/vlm_classifier/eval_sweep.py call it, prints `LEVEL:logger:message`
# (logging.BASIC_FORMAT). A user's script that sets logging up so and runs the cookbook's loop logs its phases, the
# SDK's retries and its errors in that layout.
def _default_layout(text: str) -> str:
    """The cookbook layout's records (`logger:lineno [LEVEL] message`) as logging.basicConfig() prints them."""
    import re

    return re.sub(r"(?m)^([\w.<>-]+):\d+ \[(\w+)\] ", r"\2:\1:", text)


def default_layout_retrying_500(folder: Path) -> None:
    """tinker-feedback/80's shape (the SDK retrying a 500 inside step 9's `train`) as a script that called
    logging.basicConfig() prints it to its console."""
    _rl_folder(folder, 40, 9)
    tail = _phase("sample", 30.0) + _phase("assemble_training_data", 1.0) + _phase("train", None)
    (folder / "train.log").write_text(_default_layout(rl_log(40, 9, tail + RETRY_500 * 6)))


def default_layout_crash(folder: Path) -> None:
    """issues/147's stuck-request traceback under the user's own `ERROR:__main__:` record, in the default layout."""
    _rl_folder(folder, 50, 12)
    tail = (
        _phase("sample", 30.0)
        + _phase("train", None)
        + "ERROR:__main__:Training failed\n"
        + "\n".join(VIEWER_TRACEBACK)
        + "\n"
    )
    (folder / "train.log").write_text(_default_layout(rl_log(50, 12, tail)))


# GitHub markdown: a user pastes the console into an issue (github.com/thinking-machines-lab/tinker-cookbook/issues,
# the bug template's "Logs" field) inside a ``` fence, or quotes it with `> ` (the GFM spec's block quote: `>` and
# one optional space before each line), or both (`> ```` opens a fence inside the quote).
def _markdown(text: str, *, quote: bool, fence: bool) -> str:
    lines = text.splitlines()
    if fence:
        lines = ["```python", *lines, "```"]
    if quote:
        lines = [f"> {line}" if line else ">" for line in lines]
    return "The run stops with this:\n\n" + "\n".join(lines) + "\n\nAny idea what is going on?\n"


def _pasted_issue(folder: Path, *, quote: bool, fence: bool) -> None:
    """issues/147's step-12 log and stuck-request traceback as an issue body (`issue.md`): the console's lines in
    one block, a sentence, then the traceback in a second block."""
    log = rl_log(50, 12, _phase("sample", 30.0) + _phase("train", None))
    traceback = "\n".join(VIEWER_TRACEBACK)
    body = _markdown(log, quote=quote, fence=fence) + _markdown(traceback, quote=quote, fence=fence)
    (folder / "issue.md").write_text(body)


def quoted_and_fenced_issue(folder: Path) -> None:
    _pasted_issue(folder, quote=True, fence=True)


def quoted_issue(folder: Path) -> None:
    _pasted_issue(folder, quote=True, fence=False)


def fenced_issue(folder: Path) -> None:
    _pasted_issue(folder, quote=False, fence=True)


# moreutils `ts` (joeyh.name/code/moreutils, ts(1)): `python train.py 2>&1 | ts | tee train.log` puts the time before
# every line, by default `%b %d %H:%M:%S` (`Mar 05 10:00:01`); `ts -s` the time since the start (`00:00:05`);
# `ts '%Y-%m-%d %H:%M:%.S'` a date and a time with microseconds. The run hangs in step 5's `train` with the SDK's
# heartbeat warnings going on for two hours (pod_log_hung_in_train's shape under another collector).
def _ts(lines: list[str], start_s: int, every_s: int, form: str) -> str:
    out = []
    for i, line in enumerate(lines):
        t = start_s + i * every_s
        h, m, sec = t // 3600 % 24, t % 3600 // 60, t % 60
        stamp = {
            "default": f"Mar 05 {h:02d}:{m:02d}:{sec:02d}",
            "since start": f"{h:02d}:{m:02d}:{sec:02d}",
            "date and microseconds": f"2026-03-05 {h:02d}:{m:02d}:{sec:02d}.250117",
        }[form]
        out.append(f"{stamp} {line}\n")
    return "".join(out)


def _ts_stamped_hang(folder: Path, form: str) -> None:
    """`| ts`: RL, 5 of 40 steps; step 5's `train` begins, then only heartbeat warnings for two hours."""
    _rl_folder(folder, 40, 5)
    body = rl_log(40, 5, _phase("sample", 5.0) + _phase("train", None)).splitlines()
    warnings = [HEARTBEAT.format(secs=130 + 600 * i) for i in range(12)]
    start = 0 if form == "since start" else 32400
    (folder / "train.log").write_text(_ts(body, start, 1, form) + _ts(warnings, start + 3600 + 130, 600, form))


def ts_default_hang(folder: Path) -> None:
    _ts_stamped_hang(folder, "default")


def ts_since_start_hang(folder: Path) -> None:
    _ts_stamped_hang(folder, "since start")


def ts_microseconds_hang(folder: Path) -> None:
    _ts_stamped_hang(folder, "date and microseconds")


# httpx logs every request at INFO (`HTTP Request: POST <url> "HTTP/1.1 408 Request Timeout"`): the SDK's long-poll
# of /retrieve_future answers 408 while the result is not ready (FORMATS.md 5.4), so a run waiting on `train` with
# httpx at INFO prints one such line per poll, none of them a line of interest. Collected with `kubectl logs
# --timestamps`: two hours of polls after `Starting train`.
RETRIEVE_408 = (
    "httpx:1740 [INFO] HTTP Request: POST https://tinker.thinkingmachines.dev/services/tinker-prod/api/v1/"
    'retrieve_future "HTTP/1.1 408 Request Timeout"'
)


def pod_log_polling_in_train(folder: Path) -> None:
    """`kubectl logs --timestamps`: RL, 5 of 40 steps; step 5's `train` begins at 09:00, then the SDK's 408 polls
    every 5 minutes until 11:00: the log's last line with a time is two hours after its last phase line."""
    _rl_folder(folder, 40, 5)
    body = rl_log(40, 5, _phase("sample", 5.0) + _phase("train", None)).splitlines()
    (folder / "pod.log").write_text(_k8s(body, 32400, 1) + _k8s([RETRIEVE_408] * 25, 32400 + len(body), 300))


CASES: dict[str, Callable[[Path], None]] = {
    name: builder
    for name, builder in globals().items()
    if callable(builder) and getattr(builder, "__module__", None) == __name__ and not name.startswith("_")
}
