"""The escalation bundle: everything the service's support asks for, in one zip, secrets redacted.

Built from the analysis: the HTML report, the JSON document, a Markdown summary for the support
engineer, the pyinstrument profiles re-serialised from the frames table, the worst steps' trace slice
as Chrome JSON, config.json, the metric rows, the logs' last lines and the lines around their errors
(the one thing read from the run's files again), when the slow steps ran in UTC, and a MANIFEST.json
with the SHA-256 of every member. The zip is deterministic: same analysis, same bytes.

Nothing in it names where the run sits on the machine that analysed it: the run folder's path is made
relative (redact/local_paths.py). It is written beside its name and renamed over it (whole_file.py),
so a kill while writing leaves the previous bundle, never a broken one.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import sys
import tempfile
import zipfile
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

import orjson
import polars as pl

from trace_doctor import __version__
from trace_doctor.derive import training_machine as machine
from trace_doctor.derive.wall_clock import WallClock
from trace_doctor.ingest.reading.deep_json import dumps_deep
from trace_doctor.model import Analysis, BaselineComparison
from trace_doctor.redact import redact_analysis
from trace_doctor.redact.local_paths import Localizer, relative_to_run, run_folder
from trace_doctor.report import bundle_run_files as run_files
from trace_doctor.report.markdown_text import code, inline, prose
from trace_doctor.whole_file import replacing

WORST_STEPS = 3
# The versions support asks for (the debug guide's escalation checklist): asked for when the run has none.
ASKED_PACKAGES = ("tinker", "tinker-cookbook", "python")
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps keep the archive reproducible


def safe_member(name: str) -> str:
    """An archive member name that stays inside the archive root (no absolute path, no `..`)."""
    parts = [p for p in PurePosixPath(name.replace("\\", "/")).parts if p not in ("", "/", ".", "..")]
    parts = [re.sub(r"[^A-Za-z0-9._-]", "_", p).lstrip(".") or "_" for p in parts]
    if not parts:
        raise ValueError(f"empty archive member name from {name!r}")
    return "/".join(parts)


def _json_bytes(value: Any) -> bytes:
    try:
        return (
            orjson.dumps(
                value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str
            )
            + b"\n"
        )
    except orjson.JSONEncodeError:
        # A profile 127 or more calls deep nests past orjson's 255 levels (a frame is an object in a
        # list): written without recursion, unindented.
        return dumps_deep(value, sort_keys=True).encode() + b"\n"


def _recorded(result: Analysis) -> dict[str, Any]:
    """The training machine's record the analysis made (summary.training_machine; ids, versions, W&B)."""
    return result.run_summary.training_machine or {"recorded": False}


def _wandb_lines(w: dict[str, Any]) -> list[str]:
    git = w.get("git") or {}
    gpu = w.get("gpu")
    hardware = ", ".join(
        part
        for part in (
            f"{w['cpu_count']} CPU cores" if w.get("cpu_count") else "",
            f"{w['cpu_count_logical']} logical" if w.get("cpu_count_logical") else "",
            f"{w.get('gpu_count') or 1} × {inline(gpu)}" if gpu else "",
            f"CUDA {inline(w['cuda_version'])}" if w.get("cuda_version") else "",
            f"{w['memory_total_bytes'] / 2**30:.0f} GiB RAM" if w.get("memory_total_bytes") else "",
        )
        if part
    )
    facts = [
        ("W&B run", code(w["wandb_run_id"], table=False) if w.get("wandb_run_id") else None),
        ("Python", code(w["python"], table=False) if w.get("python") else None),
        ("OS", inline(w["os"]) if w.get("os") else None),
        ("host", inline(w["host"]) if w.get("host") else None),
        ("started", inline(w["started_at"]) if w.get("started_at") else None),
        ("program", code(w["program"], table=False) if w.get("program") else None),
        ("arguments", code(" ".join(w["args"]), table=False) if w.get("args") else None),
        ("executable", code(w["executable"], table=False) if w.get("executable") else None),
        (
            "git",
            f"{code(git.get('remote') or 'remote unknown', table=False)} @ {code(git['commit'], table=False)}"
            if git.get("commit")
            else None,
        ),
        ("hardware", hardware or None),
    ]
    lines = [f"- W&B metadata {code(w['path'], table=False)}:"]
    lines += [f"  - {label}: {value}" for label, value in facts if value]
    return lines


def training_machine_lines(result: Analysis) -> list[str]:
    """The `## Training machine` section: what the run recorded about the machine that trained it."""
    recorded = _recorded(result)
    lines = ["## Training machine (as the run recorded it)", ""]
    if not recorded.get("recorded"):
        lines += [
            "- nothing recorded: no W&B metadata, pip freeze, environment check, code.diff or SDK ids in this run",
            "- support asks for the SDK versions (`pip show tinker tinker-cookbook`) and the machine "
            "(`python -c 'import platform; print(platform.platform())'`, `nvidia-smi -L`): paste them with the bundle",
            "",
        ]
        return lines
    for w in recorded.get("wandb", []):
        lines += _wandb_lines(w)
    for freeze in recorded.get("pip_freeze", []):
        lines.append(
            f"- pip freeze {code(str(freeze['source']), table=False)}: {freeze['packages']} packages "
            "(all in `training_machine.json`)"
        )
    for repo in recorded.get("cookbook", []):
        lines.append(
            f"- code.diff: repo {code(repo['repo'], table=False)} @ {code(repo['commit'], table=False)} "
            f"({code(str(repo['source']), table=False)})"
        )
    versions = recorded.get("versions", [])
    known = {v.get("package") for v in versions} | (
        {"python"} if any(w.get("python") for w in recorded.get("wandb", [])) else set()
    )
    missing = [p for p in ASKED_PACKAGES if p not in known]
    if missing:
        lines.append(
            f"- no version recorded for {', '.join(missing)}: support asks for them (`pip show tinker "
            "tinker-cookbook` and `python --version` on the training machine): paste them with the bundle"
        )
    if versions:
        lines.append("- versions:")
        for v in versions:
            where = f"{v['source']}:{v['line']}"
            lines.append(
                f"  - {inline(v['package'])} {code(v['version'], table=False)} "
                f"({inline(v['evidence'])}, {code(where, table=False)})"
            )
    lines.append("")
    return lines


def when_lines(clock: WallClock) -> list[str]:
    """The `## When` section: the slow steps' UTC windows, or why the run cannot say."""
    lines = ["## When the slowest steps ran (UTC)", ""]
    if clock.basis is not None:
        lines.append(f"From {inline(clock.basis)}; support matches these against the service's logs:")
        for window in clock.windows:
            start = window.start.isoformat(timespec="milliseconds") if window.start else "start unknown"
            lines.append(f"- step {window.step}: {start} → {window.end.isoformat(timespec='milliseconds')}")
    else:
        if clock.steps:
            lines.append(f"- slowest steps: {', '.join(map(str, clock.steps))}")
        lines.append(f"- {prose(clock.note, table=False)}")
    if clock.basis is not None and clock.note:
        lines.append(f"- {prose(clock.note, table=False)}")
    for anchor in clock.anchors:
        span = anchor["first"] if anchor["first"] == anchor["last"] else f"{anchor['first']} to {anchor['last']}"
        lines.append(f"- {inline(anchor['what'])}: {inline(span)} ({inline(anchor['zone'])})")
    lines += ["", "All of it in `timing/slow_steps_utc.json`.", ""]
    return lines


def support_summary(result: Analysis, clock: WallClock | None = None, contents: list[str] | None = None) -> str:
    """The Markdown a support engineer reads first: ids, timing, findings, versions, environment, and
    (for a bundle) when the slow steps ran and what each file holds.

    What came from the run (ids, names, messages, paths) is inert Markdown (markdown_text).
    """
    meta, summary = result.run.meta, result.run_summary
    lines = ["# trace-doctor escalation bundle", ""]
    lines += ["## Identifiers", ""]
    recorded = _recorded(result)
    sessions, runs = recorded.get("session_ids", []), recorded.get("training_run_ids", [])
    found_sessions = ", ".join(code(s, table=False) for s in sessions)
    lines.append(
        f"- Tinker session id(s): {found_sessions or 'none found in logs or config'}"
        + ("" if found_sessions else " (get it from the training process: `tc.get_info()` on its training client)")
    )
    lines.append(
        f"- Training run id(s) (tinker:// paths, SDK log lines): "
        f"{', '.join(code(r, table=False) for r in runs) or 'none found'}"
    )
    lines.append(
        f"- Model: {inline(meta.model_name or 'unknown')}; renderer: {inline(meta.renderer_name or 'unknown')}; "
        f"trainer: {meta.trainer}{' (' + inline(meta.trainer_mode) + ')' if meta.trainer_mode else ''}; "
        f"LoRA rank: {meta.lora_rank if meta.lora_rank is not None else 'unknown'}"
    )
    lines += ["", "## Step timing", ""]
    for value, label, unit in (
        (summary.wall_time_s, "wall time", " s"),
        (summary.step_time_p50_s, "median step", " s"),
        (summary.steady_step_time_s, "steady (post-warm-up) median step", " s"),
        (summary.warmup_steps, "warm-up steps", ""),
    ):
        lines.append(f"- {label}: {value if value is not None else 'unknown'}{unit if value is not None else ''}")
    if result.baseline:
        message = prose(result.baseline.message, table=False)
        lines.append(f"- against baseline: **{result.baseline.verdict}** — {message}")
        quality = result.baseline.quality
        if quality:
            text = prose(quality.message, table=False)
            lines.append(f"- training quality against baseline: **{quality.verdict}** — {text}")
    if clock is not None:
        lines += [""] + when_lines(clock)
    lines += (
        ["", f"## Findings ({len(result.findings)})", ""]
        if clock is None
        else [f"## Findings ({len(result.findings)})", ""]
    )
    for f in result.findings:
        lost = f"; ~{f.seconds_lost:.1f} s lost" if f.seconds_lost else ""
        title, message = prose(f.title, table=False), prose(f.message, table=False)
        lines.append(f"- **{f.severity}** {f.code} `{f.rule}` — {title}{lost}. {message}")
    if not result.findings:
        lines.append("- none")
    lines += [""] + training_machine_lines(result)
    lines += [
        "## Analysed on (the machine that ran trace-doctor, not the training machine)",
        "",
        f"- trace-doctor {__version__}",
        f"- Python {platform.python_version()} ({sys.implementation.name}) on {platform.system()} {platform.machine()}",
        "",
        "## Inputs read",
        "",
    ]
    for info in result.run.inputs:
        lines.append(f"- {info.kind}: {code(info.path, table=False)} ({info.records} records, {info.skipped} skipped)")
    if contents:
        lines += ["", "## In this bundle", ""] + [f"- {prose(item, table=False)}" for item in contents]
    lines += [
        "",
        "Secrets (API keys, tokens, passwords, bearer headers) were redacted before writing this bundle; "
        "paths of the run's files are relative to its folder.",
        "",
    ]
    return "\n".join(lines)


def profile_documents(result: Analysis) -> dict[str, dict[str, Any]]:
    """Each profile as pyinstrument's JSON-renderer shape, rebuilt from the frames table."""
    frames, profiles = result.run.frames, result.run.profiles
    if frames.is_empty():
        return {}
    heads = {row["profile"]: row for row in profiles.iter_rows(named=True)} if not profiles.is_empty() else {}
    documents = {}
    for name in sorted(frames["profile"].unique().drop_nulls().to_list()):
        rows = frames.filter(pl.col("profile") == name).sort("frame_id").to_dicts()
        children: dict[Any, list[dict[str, Any]]] = {}
        nodes = {}
        for row in rows:
            node = {
                "function": row.get("function"),
                "file_path": row.get("file_path"),
                "line_no": row.get("line_no"),
                "class_name": row.get("class_name"),
                "time": row.get("time_s"),
                "self_time": row.get("self_time_s"),
                "await_time": row.get("await_time_s"),
                "is_application_code": row.get("is_application_code"),
                "children": [],
            }
            nodes[row["frame_id"]] = node
            children.setdefault(row.get("parent_id"), []).append(node)
        for frame_id, node in nodes.items():
            node["children"] = children.get(frame_id, [])
        roots = [node for key, group in children.items() if key not in nodes for node in group]
        head = heads.get(name, {})
        documents[name] = {
            "start_time": head.get("start_time"),
            "duration": head.get("duration_s"),
            "sample_count": head.get("sample_count"),
            "target_description": head.get("target_description"),
            "cpu_time": head.get("cpu_time_s"),
            "async_mode": head.get("async_mode"),
            "root_frame": roots[0] if len(roots) == 1 else {"function": "[roots]", "children": roots},
        }
    return documents


def worst_steps(result: Analysis, count: int = WORST_STEPS) -> list[int]:
    """The steps with the longest extent on the trace timeline (ties: lower step first)."""
    from trace_doctor.report.export import step_ranges_us

    ranges = step_ranges_us(result.run.scan("spans"))
    return sorted(sorted(ranges, key=lambda s: (-(ranges[s][1] - ranges[s][0]), s))[:count])


def slow_steps(result: Analysis) -> list[int]:
    """The slowest steps: the longest on the trace, else the longest step totals (ties: lower step first)."""
    traced = worst_steps(result)
    if traced:
        return traced
    times = (result.derived or {}).get("step_times")
    if not isinstance(times, pl.DataFrame) or not {"step", "total_s"} <= set(times.columns):
        return []
    totals = times.select("step", "total_s").drop_nulls().filter(pl.col("total_s").is_finite())
    return sorted(totals.sort(["total_s", "step"], descending=[True, False]).head(WORST_STEPS)["step"].to_list())


def worst_steps_slice(result: Analysis) -> bytes | None:
    """Chrome JSON of every span overlapping the worst steps' time ranges."""
    from trace_doctor.report.export import chrome_json_bytes, step_ranges_us

    steps = worst_steps(result)
    if not steps:
        return None
    ranges = step_ranges_us(result.run.scan("spans"))
    keep = pl.lit(False)
    for step in steps:
        start, end = ranges[step]
        keep = keep | ((pl.col("start_us") <= end) & (pl.col("end_us").fill_null(end) >= start))
    return chrome_json_bytes(result, result.run.spans_where(keep), with_findings=True)


def _html_report(result: Analysis) -> bytes | None:
    from trace_doctor.report.html import write_html

    with tempfile.TemporaryDirectory(prefix="trace-doctor-bundle-") as tmp:
        target = Path(tmp) / "report.html"
        write_html(result, target)
        return target.read_bytes() if target.exists() else None


def _redacted(result: Analysis) -> Analysis:
    """`redact_analysis` of the analysis with its result objects in their JSON form (the form
    redaction walks: every string in them is redacted), read back typed."""
    plain = replace(
        result,
        summary=result.run_summary.to_dict(),
        baseline=result.baseline.to_dict() if result.baseline is not None else None,
    )
    clean = redact_analysis(plain)
    if clean.baseline is not None:
        clean.baseline = BaselineComparison.from_dict(clean.baseline)
    return clean


def _unique(members: dict[str, bytes], name: str) -> str:
    member = safe_member(name)
    stem, dot, suffix = member.rpartition(".")
    while member in members:
        stem += "_"
        member = f"{stem}{dot}{suffix}"
    return member


def bundle_members(result: Analysis) -> dict[str, bytes]:
    """Every member of the bundle (except the manifest), from a redacted copy of the analysis.

    The CLI analyses a redacted run (`redact_run` before the rules); an analysis of a run that was
    not redacted is redacted here after the fact (see `redact_analysis`).
    """
    from trace_doctor.report.json_doc import render_json

    redacted = _redacted(result)
    local = Localizer(run_folder(redacted.run.meta.path))
    slow = slow_steps(redacted)
    # The logs are found by where they are on this machine; everything rendered is then relative.
    logs, log_notes = run_files.log_excerpts(redacted, local)
    metrics, metrics_note = run_files.metric_rows(redacted, local, slow)
    clean = relative_to_run(redacted)
    clock = run_files.slow_steps_window(clean, slow)
    contents = [f"metrics.jsonl: {metrics_note}"]
    members: dict[str, bytes] = {
        "findings.json": render_json(clean).encode("utf-8"),
        "config.json": _json_bytes(clean.run.meta.config),
        "training_machine.json": _json_bytes(
            {**_recorded(clean), "all_versions": machine.recorded_versions(clean.run)}
        ),
        "timing/slow_steps_utc.json": _json_bytes(clock.to_dict()),
    }
    if metrics:
        members["metrics.jsonl"] = metrics
    for name, text in logs.items():
        member = _unique(members, f"logs/{name}.txt")
        members[member] = text.encode("utf-8")
        contents.append(
            f"{member}: the last {run_files.LOG_TAIL_LINES} lines of {name} and "
            f"{run_files.ERROR_CONTEXT_LINES} lines either side of its errors"
        )
    contents += log_notes
    report = _html_report(clean)
    if report is not None:
        members["report.html"] = report
    for name, document in profile_documents(clean).items():
        member = safe_member(f"profiles/{PurePosixPath(name.replace(chr(92), '/')).name}.json")
        while member in members:
            member = member.removesuffix(".json") + "_.json"
        members[member] = _json_bytes(document)
    trace_slice = worst_steps_slice(clean)
    if trace_slice is not None:
        members["trace/worst_steps.json"] = trace_slice
    members["SUMMARY.md"] = support_summary(clean, clock, contents).encode("utf-8")
    # Every member is rendered from the redacted analysis, and the log excerpts are redacted as they
    # are read, so no pass over the rendered bytes is needed (one would rewrite the report's scripts
    # and miss keys that JSON escaping or truncation had already cut apart).
    return {safe_member(name): data for name, data in members.items()}


def write_bundle(result: Analysis, path: Path) -> list[dict[str, Any]]:
    """Write the zip and return its manifest: one {path, bytes, sha256} per member."""
    members = bundle_members(result)
    manifest = [
        {"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in sorted(members.items())
    ]
    members["MANIFEST.json"] = (
        json.dumps(
            {"tool": "trace-doctor", "version": __version__, "files": manifest}, indent=2, sort_keys=True
        ).encode("utf-8")
        + b"\n"
    )
    with (
        replacing(path, make_folder=True) as part,
        zipfile.ZipFile(part, "w", compression=zipfile.ZIP_DEFLATED) as archive,
    ):
        for name in sorted(members):
            info = zipfile.ZipInfo(safe_member(name), date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, members[name])
    return manifest
