"""Classify one line of log text into a log-event kind with parsed fields, or None.

Cheap substring tests guard every regex: a 4 MB console capture is mostly lines of no interest,
and one `in` check per needle costs far less than a regex search.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trace_doctor.ingest.parsers import pyspy
from trace_doctor.ingest.reading.textfile import int64
from trace_doctor.knowledge.errors import decode_error, match_sdk_message
from trace_doctor.knowledge.tinker import (
    API_REACHABLE_LINE,
    API_UNREACHABLE_LINE,
    CALL_TIMING_LINE,
    CLIENT_CREATED_LINE,
    CLIENT_FAILED_LINE,
    GIL_MONITOR_LINE,
    HTTPX_RESPONSE_LINE,
    MODEL_DUMP_TOOK,
    ROUND_TRIP_LINE,
    RUN_ID,
    SESSION_ID,
    TINKER_HOST,
    TINKER_URI,
    USER_GAVE_UP_LINE,
    USER_RETRY_LINE,
)

TOOK = re.compile(r"^(?P<name>[\w./:-]+) took (?P<seconds>\d+(?:\.\d+)?) seconds\b")
STARTING = re.compile(r"^Starting (?P<name>[\w./:-]+)\s*$")
SERIALIZATION_VERDICT = re.compile(r"^(?P<verdict>PASS|WARNING|FAIL): (?P<detail>.*)$")
PAYLOAD = re.compile(
    r"^Payload: batch_size=(?P<batch_size>\d+), seq_len=(?P<seq_len>\d+), total_tokens=(?P<total_tokens>\d[\d,]*)"
)
# `pydantic: 2.13.0b2`, `tinker==0.38.0`, and the debug skill's environment check (skills/debug
# SKILL.md step 1), which prints `tinker SDK: {tinker.__version__}` and `Python: {sys.version}` —
# the latter followed by the build, `3.14.0 (main, Oct  7 2025, ...) [Clang ...]`.
VERSION_LINE = re.compile(
    r"^\s*(?P<package>Python|pydantic|pydantic_core|tinker|tinker_cookbook|tinker-cookbook|torch|numpy|transformers"
    r"|tokenizers|litellm)(?: SDK)?\s*(?::|==| version| )\s*v?(?P<version>\d[\w.+!-]*)"
    r"(?P<build>\s+\(.*)?\s*$",
    re.IGNORECASE,
)
YOUR_VERSION = re.compile(r"Your (?P<package>[\w-]+) version \((?P<version>\d[\w.+!-]*)\)")
FREEZE_LINE = re.compile(r"^(?P<package>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\d[\w.+!-]*)\s*$")
SITE_PACKAGES = re.compile(r"/lib/python(?P<version>3\.\d+)/site-packages/")
DIFF_REPO = re.compile(r"^### repo: (?P<repo>.+?) @ (?P<commit>[0-9a-f]{7,40})\s*$")
SERVICE_SESSION = re.compile(rf"ServiceClient initialized for session (?P<session_id>{SESSION_ID})")
TRAINING_MODEL = re.compile(rf"TrainingClient initialized for model (?P<model_id>{RUN_ID})")
TELEMETRY_SESSION = re.compile(rf"Exception logged for session ID: (?P<session_id>{SESSION_ID})")
COMMAND_LINE = re.compile(r"^Command line invocation: (?P<argv>.*)$")
LOGGING_TO = re.compile(r"^Logging to: (?P<log_dir>.*)$")
RENDERER_NOT_RECOMMENDED = re.compile(
    r"Renderer (?P<renderer>'[^']*'|\S+) is not recommended for model (?P<model>'[^']*'|\S+)"
)
RENDERER_MISMATCH = re.compile(
    r"Renderer mismatch for checkpoint (?P<checkpoint>\S+?):? checkpoint=(?P<checkpoint_renderer>\S+?),?"
    r" current=(?P<current_renderer>\S+)"
)
# renderers/base.py build_supervised_example: logged once per example built this way (FORMATS.md 3.5).
EXTENSION_PROPERTY = re.compile(
    r"train_on_what=(?P<train_on_what>\w+) with a renderer that does not satisfy the extension property"
)
# The plan, once per launch (FORMATS.md 3.5): rl/train.py logs its end batch (`max_steps` already
# applied), distillation/train_on_policy.py the same with `(dataset has N)` after it; supervised/train.py
# and preference/train_dpo.py log batches x epochs, before `max_steps`.
RL_PLAN = re.compile(r"^Will train on (?P<steps>\d+) batches(?: \(dataset has \d+\))?\s*$")
# What a terminal capture ends with when a signal stopped the process (FORMATS.md 3.5): the shell's job
# report (bash `Killed` / `Terminated`, padded before the command it names when it names one, as a batch
# script's `line 3: 4121 Killed    python train.py`; macOS sh `Killed: 9` / `Terminated: 15`; zsh
# `zsh: killed  python train.py`), the kernel's OOM line, a scheduler's cancel (`DUE TO TIME LIMIT`,
# `DUE TO PREEMPTION`, or no reason for scancel).
# A job step launched with srun ends the same way: `*** STEP 3495064.0 ON node CANCELLED AT ... ***`, after srun's
# own report of how its task ended (`srun: error: node: task 4: Out Of Memory`, `...: task 0: Killed`).
# A container's or launcher's report of how its process ended (a Kubernetes pod's `OOMKilled`, ECS' `Container
# killed due to memory usage`, a launcher's `exit code 137` / `return code list: [137]` (128 + the signal: 137 is
# SIGKILL, 143 SIGTERM), torchrun's `exitcode: -9`) and GNU timeout's `--verbose` line are such reports too.
# srun's report of how a job step's task ended, before what it says (a kill here, a native crash below).
SRUN_TASK = r"^srun: error: \S+: tasks? [\d,-]+: "
KILL_LINE = re.compile(
    r"^(?:.*\bline \d+: +\d+ +)?(?P<shell>Killed|Terminated)(?:: \d+)?(?: {2,}\S.*)?$|"
    r"^zsh: (?P<zsh>killed|terminated) +\S|"
    r"(?P<oom>[Oo]ut of memory: Killed process \d+|killed by the cgroup out-of-memory handler|oom[-_]kill"
    r"|\bOOMKilled\b|Container killed due to memory)|"
    r"\*\*\* (?:JOB \d+|STEP \d+\.\w+) ON \S+ CANCELLED AT \S+(?: DUE TO (?P<why>[A-Z ]+?))? \*\*\*|"
    + SRUN_TASK
    + r"(?:(?P<srun_oom>Out Of Memory)|(?P<srun>Killed|Terminated))\s*$|"
    r"\b(?:exit|return|exited with) ?(?:code|status)(?: list)?:? \[?(?P<code>137|143)\]?(?!\d)|"
    r"\bexitcode: (?P<torch>-9|-15)\b|"
    r"^timeout: sending signal (?P<timeout>TERM|KILL|INT) to command"
)

EXIT_CODE_NEEDLES = ("code 137", "status 137", "[137]", "code 143", "status 143", "[143]", "exitcode: -")

# A crash in native code (FORMATS.md 3.5 console): Python's faulthandler (`-X faulthandler`,
# PYTHONFAULTHANDLER=1) prints `Fatal Python error: <what>` then each thread's frames, innermost first, as
# `  File "<path>", line N in <func>` (no comma), the crashing one under `Current thread 0x... (most recent
# call first):`; the shell then reports the signal (`Segmentation fault (core dumped)`, bash in a script
# `line 3: 4121 Aborted  python train.py`, zsh `zsh: segmentation fault  python ...`, macOS `Bus error: 10`; srun
# for a job step's task, `srun: error: node: task 289: Bus error`).
FATAL_ERROR = re.compile(r"^Fatal Python error: (?P<what>[^:]+?)(?:: .*)?\s*$")
FAULT_THREAD = re.compile(
    r"^(?P<current>Current thread|Thread) 0x[0-9a-fA-F]+ (?:\[[^\]]*\] )?\(most recent call first\):"
)
FAULT_FRAME = re.compile(r'^  File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.+)$')
NATIVE_CRASH_REPORT = re.compile(
    r"^(?:.*\bline \d+: +\d+ +)?(?P<what>Segmentation fault|Aborted|Bus error|Illegal instruction"
    r"|Floating point exception)(?: \(core dumped\)|: \d+)?(?: {2,}\S.*)?$"
    r"|^zsh: (?P<zsh>segmentation fault|abort|bus error|illegal hardware instruction|floating point exception) +\S"
    r"|" + SRUN_TASK + r"(?P<srun>Segmentation fault|Aborted|Bus error|Illegal instruction"
    r"|Floating point exception)(?: \(core dumped\))?\s*$"
)
NATIVE_SIGNALS = {
    "segmentation fault": "SIGSEGV",
    "aborted": "SIGABRT",
    "abort": "SIGABRT",
    "bus error": "SIGBUS",
    "illegal instruction": "SIGILL",
    "illegal hardware instruction": "SIGILL",
    "floating point exception": "SIGFPE",
}

# A stack dump of the live process, taken while it sat still: `py-spy dump --pid` (`Process N: <command>`, then
# per thread `Thread N (active|idle): "Name"` and its frames innermost first as `    func (file:line)`; pyspy.py),
# or faulthandler's watchdog `dump_traceback_later(timeout)` (`Timeout (H:MM:SS)!`, then `Thread 0x...` blocks as
# in a fatal error's dump). The process was alive when it was taken: it was not killed there.
PYSPY_PROCESS = pyspy.PROCESS
PYSPY_THREAD = pyspy.THREAD
PYSPY_FRAME = pyspy.FRAME
WATCHDOG_TIMEOUT = re.compile(r"^Timeout \((?P<h>\d+):(?P<m>\d\d):(?P<s>\d\d)(?:\.\d+)?\)!\s*$")


def live_stack_start(text: str) -> Classified | None:
    """The first line of a live process's stack dump (py-spy's, faulthandler's watchdog), or None."""
    if PYSPY_THREAD.match(text):
        return Classified("live-stack", text, {"tool": "py-spy", "threads": []})
    if (found := WATCHDOG_TIMEOUT.match(text)) is not None:
        timer = int(found["h"]) * 3600 + int(found["m"]) * 60 + int(found["s"])
        return Classified("live-stack", text, {"tool": "faulthandler", "timer_s": timer, "threads": []})
    return None


def pyspy_frame(text: str) -> str | None:
    """A py-spy frame as `func (file:line)` (`func (file)` when py-spy knew no line: a native frame), or None."""
    found = PYSPY_FRAME.match(text)
    if found is None:
        return None
    return f"{found['func'].strip()} ({found['file']}{':' + found['line'] if found['line'] else ''})"


def native_crash(text: str) -> Classified | None:
    """faulthandler's `Fatal Python error:` line or the shell's report of a crash signal, as the error that
    ended the run: its exception type is the signal (`SIGSEGV`), or `Fatal Python error` when it names none."""
    if (found := FATAL_ERROR.match(text)) is not None:
        what = found["what"].strip()
        signal = NATIVE_SIGNALS.get(what.lower())
        fields = {"exception_type": signal or "Fatal Python error", "native_crash": what, "signal": signal}
        return Classified("error", text, {k: v for k, v in fields.items() if v is not None})
    if (found := NATIVE_CRASH_REPORT.match(text)) is not None:
        what = found["what"] or found["zsh"] or found["srun"]
        signal = NATIVE_SIGNALS[what.lower()]
        return Classified("error", text, {"exception_type": signal, "native_crash": what, "signal": signal})
    return None


# Where a frame's module path starts: after the installed packages' folder or the interpreter's library, as
# py-spy shows it (`torch/nn/functional.py`, `asyncio/base_events.py`); a script's own file by its name.
MODULE_PATH = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python3\.\d+)/")


def fault_frame(text: str) -> str | None:
    """A faulthandler frame as `func (module/path.py:line)` (MODULE_PATH), or None."""
    found = FAULT_FRAME.match(text)
    if found is None:
        return None
    path = found["file"]
    shown = MODULE_PATH.sub("", path) if MODULE_PATH.match(path) else path.rsplit("/", 1)[-1]
    return f"{found['func'].strip()} ({shown}:{found['line']})"


def kill_signal(found: re.Match[str]) -> str:
    """The signal a KILL_LINE match reports: a shell's `Terminated` is SIGTERM, every other report SIGKILL
    (a scheduler's cancel sends SIGTERM first and SIGKILL at its grace period's end; the line is printed
    when the job is cancelled, whichever ended it)."""
    shell = found["shell"] or found["zsh"] or found["srun"]
    if shell is not None:
        return "SIGTERM" if shell.lower() == "terminated" else "SIGKILL"
    if found["timeout"] is not None:
        return "SIG" + found["timeout"]
    if found["code"] == "143" or found["torch"] == "-15":
        return "SIGTERM"
    return "scheduler" if "CANCELLED AT" in found[0] else "SIGKILL"


def kill_reason(found: re.Match[str]) -> str | None:
    """Why a KILL_LINE match says the process was stopped, when it says: `time limit` (a scheduler's or GNU
    timeout's), `out of memory` (the OOM killer, a container's memory limit), a scheduler's own reason."""
    if found["why"]:
        return found["why"].strip().lower()
    if found["timeout"] is not None:
        return "time limit"
    return "out of memory" if found["oom"] is not None or found["srun_oom"] is not None else None


# A tqdm progress bar (rl/train.py gather_with_progress: `Sampling batch N`), redrawn after a carriage return
# with no newline until it closes: `{desc}: {percent}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]`.
# The line's last redraw is where the bar stood when the output ended.
PROGRESS_BAR = re.compile(r"^(?P<desc>[^\r]*?): *(?P<percent>\d{1,3})%\|[^|]*\| *(?P<n>\d+)/(?P<total>\d+)\b")
# The line every trainer logs last, once its final checkpoint is saved (supervised/train.py, rl/train.py,
# distillation/train_on_policy.py `Training completed successfully`; preference/train_dpo.py `DPO training ...`,
# distillation/sdft.py `SDFT training ...`, train_off_policy.py `Off-policy distillation completed successfully`).
COMPLETED = re.compile(r"^(?:[\w-]+ )?(?:[Tt]raining|distillation) completed successfully\s*$")
EPOCH_PLAN = re.compile(r"^Training for (?P<batches>\d+) batches x (?P<epochs>\d+) epochs = (?P<steps>\d+) steps\s*$")
SKIPPED_BATCH = re.compile(r"Batch (?P<batch>\d+): all groups failed or filtered, skipping batch")
# Async RL's staleness filter (rl/train.py training_loop): a group sampled more than
# max_steps_off_policy steps ago is requeued, or dropped once the dataloader is done (FORMATS.md 3.5).
STALE_SAMPLES = re.compile(r"Step (?P<step>\d+): Samples are too stale, (?P<action>requeuing|discarding)")
PY_WARNING = re.compile(r"^(?P<file>\S+):(?P<line>\d+): (?P<category>\w*Warning): (?P<message>.*)$")
# Retries of an HTTP client (FORMATS.md 5.4; tinker SDK lib/retry_handler.py and the Stainless-generated
# _base_client.py that tinker, openai and anthropic share). Tinker logs these at DEBUG (TINKER_LOG=debug);
# openai logs `Retrying request to ... in ... seconds` at INFO.
RETRY_BACKOFF = re.compile(
    r"^Retrying request to (?P<url>\S+) in (?P<backoff_s>\d+(?:\.\d+)?) seconds"
    r"|^Retrying in (?P<handler_backoff_s>\d+(?:\.\d+)?)s\b"
)
RETRY_CAUSE = re.compile(
    r"^Retrying due to status code (?P<status>\d{3})"
    r"|^Request attempt #(?P<attempt>\d+) failed with (?:status (?P<attempt_status>\d{3})|error: (?P<error>.*))"
    r"|^Request (?P<timeout>timed out)\s*$"
    r"|^Request failed with connection error: (?P<connection>.*)"
)
EXCEPTION_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Timeout|Failure)|[A-Za-z_][\w.]*\.[A-Z]\w*)"
    r"(?:: (?P<message>.*))?$"
)

# The debug guide's own printouts (FORMATS.md 5.5): bare prints that can land between the lines of a
# log record (stdout and the log share a console capture), so they are looked for there too.
GUIDE_NEEDLES = (
    "API round-trip:",
    "API reachable (",
    "API unreachable:",
    "Training client created:",
    "Training client failed:",
    "submit: ",
    " on attempt ",
    " attempts",
)
# Any of these substrings makes a line worth classifying; the rest are counted and passed over.
NEEDLES = (
    "GIL monitor",
    " took ",
    "Starting ",
    "model_dump()",
    "PASS: ",
    "WARNING: ",
    "FAIL: ",
    "Payload: ",
    "heartbeat",
    "paused",
    "Retrying request",
    "Retrying in ",
    "Retrying due to status code",
    "Request attempt #",
    "Request timed out",
    "Request failed with connection error",
    "non-retryable",
    "Synchronous method",
    "retrieve_futures",
    "elemetry",
    "JWT refresh",
    "DEPRECATED:",
    "initialized for",
    "Exception logged for session",
    "Command line invocation:",
    "Logging to:",
    "Renderer",
    "extension property",
    "skipping batch",
    "Will train on ",
    "Training for ",
    "Killed",
    "zsh: ",
    "Terminated",
    "out-of-memory",
    "oom-kill",
    "oom_kill",
    "CANCELLED AT",
    "Out Of Memory",
    "OOMKilled",
    "Container killed",
    *EXIT_CODE_NEEDLES,
    "timeout: sending signal",
    "too stale",
    "Warning: ",
    *GUIDE_NEEDLES,
    "HTTP Request:",
    "%|",
    "completed successfully",
)
# HTTP statuses a client retries (FORMATS.md 5.4: 408 from /retrieve_future long-polls is the normal
# "not ready yet", so it is not counted).
RETRIED_STATUSES = frozenset({429})


@dataclass
class Classified:
    """A line of interest: its kind, the message to show, and what was parsed out of it."""

    kind: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


def interesting(text: str) -> bool:
    """Whether any needle occurs in the line (the cheap test before classify)."""
    return any(needle in text for needle in NEEDLES)


def kill_report(text: str) -> bool:
    """Whether a line is the shell's, kernel's or scheduler's report of a kill (KILL_LINE): printed to the
    terminal right after the last log record, so it is looked for inside a record too."""
    needles = ("Kill", "kill", "CANCELLED", "Terminated", "Out Of Memory", "timeout: ", *EXIT_CODE_NEEDLES)
    return any(n in text for n in needles) and KILL_LINE.search(text.strip()) is not None


def progress_bar(line: str) -> Classified | None:
    """A tqdm bar's last redraw on a line (PROGRESS_BAR), with its description and count."""
    last = next((part.strip() for part in reversed(line.split("\r")) if part.strip()), "")
    found = PROGRESS_BAR.match(last)
    if found is None:
        return None
    return Classified(
        "progress-bar", last, {"desc": found["desc"].strip(), "n": int64(found["n"]), "total": int64(found["total"])}
    )


def guide_printout(text: str) -> bool:
    """Whether the line may be one of the guide's printouts (the cheap test inside a log record)."""
    return any(needle in text for needle in GUIDE_NEEDLES)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def classify_message(message: str, level: str | None, logger: str | None) -> Classified | None:
    """The kind of one log message (a record's first line, or a bare stdout line)."""
    if (found := GIL_MONITOR_LINE.search(message)) is not None:
        return Classified(
            "gil-monitor",
            message,
            {
                "actual_s": _number(found["actual"]),
                "expected_s": _number(found["expected"]),
                "jitter_s": _number(found["jitter"]),
            },
        )
    if (found := MODEL_DUMP_TOOK.search(message)) is not None:
        return Classified("serialization-test", message, {"model_dump_s": _number(found["seconds"])})
    if (guide := _guide_printout(message)) is not None:
        return guide
    if logger is None and (found := SERIALIZATION_VERDICT.match(message)) is not None:
        return Classified("serialization-test", message, {"verdict": found["verdict"], "detail": found["detail"]})
    if logger is None and (found := PAYLOAD.match(message)) is not None:
        return Classified(
            "serialization-test", message, {k: int64(v.replace(",", "")) for k, v in found.groupdict().items()}
        )
    if level in ("ERROR", "CRITICAL"):
        return _error(message, level)
    if (found := TOOK.match(message)) is not None:
        return Classified(
            "took", message, {"name": found["name"], "seconds": _number(found["seconds"]), "phase": "end"}
        )
    if (found := STARTING.match(message)) is not None:
        return Classified("took", message, {"name": found["name"], "seconds": None, "phase": "start"})
    if (retry := _request_retry(message, logger)) is not None:
        return retry
    if (retry := _http_or_user_retry(message)) is not None:
        return retry
    if (sdk := match_sdk_message(message)) is not None:
        template, captured = sdk
        fields: dict[str, Any] = {"sdk_message": template.id, **captured}
        if "secs" in fields:
            # The SDK templates capture `[\d.]+`, which also takes `1..2`: keep such a value as text.
            try:
                fields["secs"] = _number(fields["secs"])
            except ValueError:
                pass
        return Classified(template.kind, message, fields)
    if (found := COMMAND_LINE.match(message)) is not None:
        return Classified("restart", message, {"marker": "command-line", "argv": found["argv"]})
    # ml_log also logs `Logging to: <wandb run URL>` at every metrics write: not a process start.
    if (found := LOGGING_TO.match(message)) is not None and not found["log_dir"].startswith(("http://", "https://")):
        return Classified("restart", message, {"marker": "logging-to", "log_dir": found["log_dir"].strip()})
    if (found := RENDERER_NOT_RECOMMENDED.search(message)) is not None:
        return Classified(
            "renderer",
            message,
            {
                "renderer": found["renderer"].strip("'"),
                "model": found["model"].strip("'"),
                "problem": "not-recommended",
            },
        )
    if (found := RENDERER_MISMATCH.search(message)) is not None:
        return Classified("renderer", message, {**found.groupdict(), "problem": "mismatch"})
    if (found := EXTENSION_PROPERTY.search(message)) is not None:
        return Classified(
            "renderer", message, {"problem": "extension-property", "train_on_what": found["train_on_what"]}
        )
    if level is None and "%|" in message and (bar := progress_bar(message)) is not None:
        return bar
    if level is None and (found := KILL_LINE.search(message)) is not None:
        # Only a bare line (no logger, no level): a log record that mentions `Killed` is not the shell's report.
        return Classified("killed", message, {"why": kill_reason(found), "signal": kill_signal(found)})
    if level is not None and COMPLETED.match(message) is not None:
        return Classified("completed", message, {})
    if (found := RL_PLAN.match(message)) is not None:
        return Classified("plan", message, {"steps": int64(found["steps"]), "capped": True})
    if (found := EPOCH_PLAN.match(message)) is not None:
        plan = {key: int64(value) for key, value in found.groupdict().items()}
        return Classified("plan", message, {**plan, "capped": False})
    if (found := SKIPPED_BATCH.search(message)) is not None:
        return Classified("skipped-batch", message, {"batch": int64(found["batch"])})
    if (found := STALE_SAMPLES.search(message)) is not None:
        return Classified("stale-samples", message, {"step": int64(found["step"]), "action": found["action"]})
    for pattern, key in (
        (SERVICE_SESSION, "session_id"),
        (TRAINING_MODEL, "model_id"),
        (TELEMETRY_SESSION, "session_id"),
    ):
        if (found := pattern.search(message)) is not None:
            return Classified("session", message, {key: found[key]})
    if (found := PY_WARNING.match(message)) is not None:
        return Classified(
            "warning", message, {"category": found["category"], "file": found["file"], "line_no": int64(found["line"])}
        )
    if level == "WARNING":
        return Classified("warning", message, {})
    return None


def _request_retry(message: str, logger: str | None) -> Classified | None:
    """A client's retry line: its backoff sleep, or the cause (status, timeout, connection error) of a retry.

    Only `Retrying request to URL in S seconds` is distinctive enough to be taken from a bare line;
    the short forms (`Request timed out`, `Retrying in 1.02s`) count only inside a log record.
    """
    if not message.startswith(("Retrying ", "Request ")):
        return None
    if (found := RETRY_BACKOFF.match(message)) is not None and (logger is not None or found["url"]):
        seconds = found["backoff_s"] or found["handler_backoff_s"]
        fields: dict[str, Any] = {"retry": "backoff", "backoff_s": _number(seconds)}
        if found["url"]:
            fields["url"] = found["url"]
        return Classified("request-retry", message, fields)
    if logger is not None and (found := RETRY_CAUSE.match(message)) is not None:
        status = found["status"] or found["attempt_status"]
        fields = {"retry": "cause"}
        if status:
            fields["status"] = int64(status)
        elif found["timeout"]:
            fields["error"] = "timeout"
        elif found["connection"] is not None:
            fields["error"] = "connection"
            fields["detail"] = found["connection"][:300]
        else:
            fields["error"] = "other"
            fields["detail"] = (found["error"] or "")[:300]
        if found["attempt"]:
            fields["attempt"] = int64(found["attempt"])
        return Classified("request-retry", message, fields)
    return None


def _guide_printout(message: str) -> Classified | None:
    """The debug guide's network check, smoke test and call timing lines (FORMATS.md 5.5)."""
    if "API " in message:
        if (found := ROUND_TRIP_LINE.search(message)) is not None:
            return Classified("round-trip", message, {"seconds": _number(found["seconds"]), "check": "network"})
        if (found := API_REACHABLE_LINE.search(message)) is not None:
            return Classified(
                "smoke-test",
                message,
                {"step": 1, "ok": True, "seconds": _number(found["seconds"]), "models": int64(found["models"])},
            )
        if (found := API_UNREACHABLE_LINE.search(message)) is not None:
            return _smoke_failure(message, 1, found)
    if "Training client " in message:
        if (found := CLIENT_CREATED_LINE.search(message)) is not None:
            return Classified("smoke-test", message, {"step": 2, "ok": True, "info": found["info"][:300]})
        if (found := CLIENT_FAILED_LINE.search(message)) is not None:
            return _smoke_failure(message, 2, found)
    if "submit: " in message and (found := CALL_TIMING_LINE.search(message)) is not None:
        return Classified(
            "call-timing", message, {"submit_s": _number(found["submit"]), "wait_s": _number(found["wait"])}
        )
    return None


def _smoke_failure(message: str, step: int, found: re.Match[str]) -> Classified:
    """A failed smoke-test step: which step, the exception, and the known errors it names."""
    fields: dict[str, Any] = {"step": step, "ok": False, "error_type": found["type"]}
    if found["message"]:
        fields["error_message"] = found["message"][:300]
    if (known := decode_error(message)) is not None:
        fields["error_id"] = known.id
    # The exception behind the failed step (an unset API key, a 403, a 429) is decoded on its own too,
    # unless it only restates the step's reading (a connection error is what "unreachable" means).
    inner = decode_error(f"{found['type']}: {found['message'] or ''}")
    if inner is not None and inner.id not in (fields.get("error_id"), "connection-error"):
        fields["exception_error_id"] = inner.id
    return Classified("smoke-test", message, fields)


def _http_or_user_retry(message: str) -> Classified | None:
    """httpx's response line for a status a client retries, or a user's own retry loop's lines."""
    if message.startswith("HTTP Request:") and (found := HTTPX_RESPONSE_LINE.match(message)) is not None:
        status = int(found["status"])
        if status not in RETRIED_STATUSES and not 500 <= status < 600:
            return None
        service = "tinker" if TINKER_HOST.match(found["url"]) else "unknown"
        return Classified(
            "request-retry",
            message,
            {"retry": "cause", "status": status, "url": found["url"], "service": service, "client": "httpx"},
        )
    if (found := USER_RETRY_LINE.search(message)) is not None:
        error = "timeout" if found["cause"] == "Timeout" else "other"
        # The guide's retry loop wraps the SDK's calls: its retries are of Tinker requests.
        return Classified(
            "request-retry",
            message,
            {
                "retry": "cause",
                "error": error,
                "attempt": int64(found["attempt"]),
                "attempts": int64(found["attempts"]),
                "service": "tinker",
                "client": "user retry loop",
            },
        )
    if (found := USER_GAVE_UP_LINE.search(message)) is not None:
        return Classified(
            "error",
            message,
            {"error_id": "retries-exhausted", "attempts": int64(found["attempts"]), "client": "user retry loop"},
        )
    return None


def _error(message: str, level: str) -> Classified:
    fields: dict[str, Any] = {}
    known = decode_error(message)
    if known is not None:
        fields["error_id"] = known.id
    sdk = match_sdk_message(message)
    if sdk is not None:
        fields["sdk_message"] = sdk[0].id
    return Classified("error", message, fields)


def classify_exception_line(text: str) -> tuple[str, str | None] | None:
    """(type, message) if the line is a traceback's final `XxxError: msg` line."""
    found = EXCEPTION_LINE.match(text)
    if found is None:
        return None
    return found["type"], found["message"]


def versions_in(text: str, *, freeze_file: bool) -> list[tuple[str, str, str]]:
    """(package, version, evidence) pairs a line reveals; empty for most lines."""
    found: list[tuple[str, str, str]] = []
    if (match := VERSION_LINE.match(text)) is not None and (match["build"] is None or match["package"] == "Python"):
        found.append((match["package"].lower().replace("_", "-"), match["version"], "version line"))
    elif freeze_file and (match := FREEZE_LINE.match(text)) is not None:
        found.append((match["package"].lower().replace("_", "-"), match["version"], "pip freeze"))
    if (match := YOUR_VERSION.search(text)) is not None:
        found.append((match["package"].lower(), match["version"], "serialization test"))
    if "site-packages/" in text and (match := SITE_PACKAGES.search(text)) is not None:
        found.append(("python", match["version"], "site-packages path"))
    if text.startswith("### ") and (match := DIFF_REPO.match(text)) is not None:
        found.append(("git:" + match["repo"].strip(), match["commit"], "code.diff repo commit"))
    return found


def tinker_run_ids(text: str) -> list[str]:
    """Training run ids named in tinker:// paths on this line."""
    return TINKER_URI.findall(text) if "tinker://" in text else []
