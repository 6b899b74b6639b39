"""Console captures as a metrics source: the cookbook's printed metric tables (or, without them, the
legacy `Starting`/`took` lines) become the steps table of a run that has no metrics.jsonl, and give the
same findings as that run's metrics.jsonl."""

from __future__ import annotations

import io
import json
import math
import shutil
import tracemalloc
from pathlib import Path

import pytest
from conftest import ROOT
from rich.console import Console
from rich.table import Table

from fixtures.sim.textlog import metrics_table_record
from trace_doctor.api import analyze, load_run
from trace_doctor.ingest.parsers.console_keys import resolve_cut_keys
from trace_doctor.ingest.parsers.console_metrics import SECOND_COPY_NOTE, console_value, parse_console_metrics
from trace_doctor.ingest.parsers.console_tables import metric_tables, whole_tables
from trace_doctor.ingest.parsers.console_timeline import timeline_steps
from trace_doctor.ingest.reading import textfile

# The corpus beside the checkout (CI, the main checkout) or at the machine's shared place (a worktree).
CORPUS = next((p for p in (ROOT.parent / "shared" / "corpus", Path("/work/shared/corpus")) if p.exists()), None)
CORPUS_MISSING = "the real-run corpus (../shared/corpus or /work/shared/corpus) is not present on this machine"

RL_ROW = {
    "progress/batch": 3,
    "optim/lr": 4e-05,
    "env/all/reward/total": 0.4217,
    "env/all/by_group/frac_all_bad": 0.125,
    "env/all/by_group/frac_all_good": 0.25,
    "test/env/all/by_group/frac_all_bad": 0.5,
    "test/env/all/by_group/frac_all_good": 0.0,
    "optim/kl_sample_train_v1": 1.5e-3,
    "time/total": 83.0,
    "time/policy_sample:total": 1702.5,
}


def _write(path: Path, *records: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(records) + "\n", encoding="utf-8")
    return path


# --- the table reader ------------------------------------------------------------------------------


def test_ansi_coloured_table_reads_like_a_plain_one():
    plain = metric_tables(metrics_table_record(RL_ROW, 3).split("\n"))
    coloured_text = metrics_table_record(RL_ROW, 3, colour=True)
    assert "\x1b[" in coloured_text
    coloured = metric_tables(coloured_text.split("\n"))
    assert [(c.key, c.value) for c in coloured[0].cells] == [(c.key, c.value) for c in plain[0].cells]
    assert coloured[0].step == 3 and coloured[0].closed
    # The console hides the aggregate key; floats are printed with 6 decimals.
    cells = {c.key: c.value for c in plain[0].cells}
    assert "time/policy_sample:total" not in cells
    assert cells["optim/lr"] == "0.000040" and cells["progress/batch"] == "3"


def test_table_cut_mid_write_keeps_its_whole_rows():
    lines = metrics_table_record(RL_ROW, 7).split("\n")
    cut_at = next(i for i, line in enumerate(lines) if "optim/kl_sample" in line)
    lines = [*lines[:cut_at], lines[cut_at][:25]]  # the process died while writing this row
    (table,) = metric_tables(lines)
    assert not table.closed and table.cut_line == cut_at + 1
    assert [c.key for c in table.cells][-1] == "env/all/reward/total"


def test_markdown_metric_value_table_in_model_output_is_not_a_metrics_table():
    lines = ["## Final Summary", "", "| Metric | Value |", "|-------|--------|", "| **Valid Runs** | 14 |", ""]
    assert metric_tables(lines) == []


def test_wrapped_value_and_ascii_box_are_read():
    # Rich draws ASCII boxes on a console that cannot encode box characters, and wraps a long value.
    class AsciiFile(io.StringIO):
        encoding = "ascii"

    out = AsciiFile()
    table = Table(show_header=True)
    table.add_column("Metric", width=20)
    table.add_column("Value")
    table.title = "Step 2"
    table.add_row("run_name", "a very long name " * 4)
    table.add_row("train_mean_nll", "1.250000")
    Console(file=out, width=60).print(table)
    lines = out.getvalue().split("\n")
    assert lines[1].startswith("+--")
    (read,) = metric_tables(lines)
    assert read.step == 2 and read.closed
    assert [(c.key, c.value) for c in read.cells] == [
        ("run_name", ("a very long name " * 4).strip()),
        ("train_mean_nll", "1.250000"),
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [("3", 3.0), ("0.000040", 4e-05), ("1.5e-07", 1.5e-07), ("-2E+3", -2000.0), ("inf", math.inf), ("-inf", -math.inf)],
)
def test_values_parse_as_floats(text, value):
    assert console_value(text) == value


def test_nan_bool_and_text_values():
    assert math.isnan(console_value("nan"))
    assert console_value("True") is True and console_value("False") is False
    assert console_value("[1, 2]") == "[1, 2]"


# --- cut keys --------------------------------------------------------------------------------------


def test_cut_keys_map_to_full_keys_when_unambiguous():
    # Old versions fixed the Metric column at 30 characters: the eval keys are cut, two of them to the
    # same `…frac_al…` prefix; the training keys shown whole in the same table tell them apart.
    tables = metric_tables(metrics_table_record(RL_ROW, 0, metric_width=30).split("\n"))
    shown = [c.key for c in tables[0].cells]
    assert shown.count("test/env/all/by_group/frac_al…") == 2
    assert resolve_cut_keys(tables) == []
    cells = {c.key: c.value for c in tables[0].cells}
    assert cells["test/env/all/by_group/frac_all_bad"] == "0.500000"
    assert cells["test/env/all/by_group/frac_all_good"] == "0.000000"


def test_ambiguous_cut_key_is_kept_as_written_and_reported(tmp_path):
    row = {"custom/metric_with_a_long_name_a": 1.0, "custom/metric_with_a_long_name_b": 2.0, "loss": 0.5}
    lines = metrics_table_record(row, 0, metric_width=30).split("\n")
    unresolved = resolve_cut_keys(metric_tables(lines))
    shown = "custom/metric_with_a_long_nam…"  # 29 characters and the mark: the column's 30
    assert [u.shown for u in unresolved] == [shown]
    log = _write(tmp_path / "logs.log", *lines)
    run = load_run(log)
    assert shown in run.steps.columns
    assert any("was cut by the console table" in w.problem for w in run.warnings)


# --- a run made of its console capture -------------------------------------------------------------


def test_console_only_run_has_steps_trainer_and_a_metrics_input(tmp_path):
    records = [metrics_table_record({**RL_ROW, "progress/batch": i}, i, colour=True) for i in range(4)]
    log = _write(tmp_path / "run" / "logs.log", "root:791 [INFO] Command line invocation: python train.py", *records)
    run = load_run(log.parent)
    assert run.steps["step"].to_list() == [0, 1, 2, 3]
    assert run.steps["env/all/reward/total"].to_list() == pytest.approx([0.4217] * 4, abs=5e-7)
    assert run.meta.trainer == "rl"  # from the metric keys: there is no config.json
    kinds = {(i.kind, Path(i.path).name, i.records) for i in run.inputs}
    assert ("metrics", "logs.log", 4) in kinds
    assert any(i.kind == "log" and Path(i.path).name == "logs.log" for i in run.inputs)


def test_console_copy_beside_metrics_jsonl_is_not_read_twice(tmp_path):
    run_dir = tmp_path / "run"
    rows = [{"step": i, "train_mean_nll": 1.0 / (i + 1), "num_loss_tokens": 640} for i in range(3)]
    _write(run_dir / "metrics.jsonl", *(json.dumps(r) for r in rows))
    _write(
        run_dir / "logs.log",
        *(metrics_table_record({k: v for k, v in r.items() if k != "step"}, r["step"]) for r in rows),
    )
    run = load_run(run_dir)
    assert run.steps.height == 3
    assert {Path(i.path).name for i in run.inputs if i.kind == "metrics"} == {"metrics.jsonl"}
    (log,) = [i for i in run.inputs if i.kind == "log"]
    assert log.note == SECOND_COPY_NOTE


def test_console_capture_is_read_in_blocks_not_whole(tmp_path, monkeypatch):
    """A console-only run's capture costs the tables it keeps, not its size: 4 MB of log lines between
    three tables, read in 16 KB blocks, peak a small part of the capture's size (read whole: over it)."""
    monkeypatch.setattr(textfile, "READ_BLOCK_BYTES", 16 * 1024)
    filler = "httpx:1025 [INFO] HTTP Request: POST https://tinker.example/api/v1/forward_backward 200\n" * 16_000
    log = tmp_path / "run" / "logs.log"
    log.parent.mkdir()
    with open(log, "w", encoding="utf-8") as out:
        for step in range(3):
            out.write(filler + metrics_table_record({**RL_ROW, "progress/batch": step}, step) + "\n")
    size = log.stat().st_size
    assert size > 4_000_000
    warm = _write(tmp_path / "warm" / "logs.log", metrics_table_record(RL_ROW, 0))
    parse_console_metrics([warm], [])  # the modules and patterns a first call sets up are not the capture's
    tracemalloc.start()
    try:
        steps, inputs = parse_console_metrics([log], [])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert steps["step"].to_list() == [0, 1, 2]
    assert [(i.kind, i.records) for i in inputs] == [("metrics", 3)]
    assert peak < size / 16, f"peak {peak:,} bytes for a {size:,}-byte capture"


def test_tables_read_a_line_at_a_time_match_every_prefix_read_at_once():
    """The live reader takes the whole tables of a file so far; the cold reader, the tables of the whole
    file as its lines come: both are one scanner, and a table cut by the end of the lines so far waits."""
    lines = []
    for step in range(3):
        lines += ["text before", *metrics_table_record({**RL_ROW, "progress/batch": step}, step).split("\n")]
    everything = metric_tables(iter(lines))
    assert [t.step for t in everything] == [0, 1, 2] and all(t.closed for t in everything)
    for end in range(len(lines) + 1):
        whole, keep = whole_tables(lines[:end])
        assert [t.line for t in whole] == [t.line for t in everything if t.line + len(t.cells) + 2 <= end]
        # the lines kept for the next look hold the header of any table not taken yet
        assert all(t.line - 1 >= keep for t in everything if t not in whole and t.line <= end)


def test_timeline_steps_from_starting_took_lines():
    lines = [
        "root:529 [INFO] Command line invocation: train.py",
        "tinker_cookbook.utils.misc_utils:20 [INFO] Starting sample",
        "tinker_cookbook.utils.misc_utils:23 [INFO] sample took 38.91 seconds",
        "tinker_cookbook.utils.misc_utils:20 [INFO] Starting train",
        "tinker_cookbook.utils.misc_utils:23 [INFO] train took 2.86 seconds",
        "tinker_cookbook.utils.misc_utils:20 [INFO] Starting sample",  # the loop comes round again
        "tinker_cookbook.utils.misc_utils:23 [INFO] sample took 35.74 seconds",
        "tinker_cookbook.utils.misc_utils:20 [INFO] Starting train",
        "tinker_cookbook.utils.misc_utils:23 [INFO] train took 2.74 seconds",
        "tinker_cookbook.utils.ml_log:147 [INFO] Wrote metrics to /tmp/run/metrics.jsonl",
        "\x1b[92mtinker_cookbook.utils.misc_utils:20 [INFO] Starting train\x1b[0m",
        "tinker_cookbook.utils.misc_utils:23 [INFO] train took 3.0 seconds",
        "tinker_cookbook.utils.ml_log:475 [INFO] Logging to: /tmp/run",  # a new process: counts from 0
        "tinker_cookbook.utils.misc_utils:23 [INFO] sample took 40.5 seconds",
    ]
    steps = timeline_steps(lines)
    assert [(s.step, s.times) for s in steps] == [
        (0, {"time/sample": 38.91, "time/train": 2.86}),
        (1, {"time/sample": 35.74, "time/train": 2.74}),
        # step 2 (cut by the relaunch) and the relaunch's step 0 (cut by the end of the capture) never
        # reached `Wrote metrics`: unfinished, not steps
    ]


def test_timeline_run_without_tables(tmp_path):
    lines = ["root:529 [INFO] Command line invocation: train.py"]
    for seconds in (5.0, 6.0, 7.0):
        lines += [
            "tinker_cookbook.utils.misc_utils:20 [INFO] Starting get_batch",
            "tinker_cookbook.utils.misc_utils:23 [INFO] get_batch took 0.05 seconds",
            "tinker_cookbook.utils.misc_utils:20 [INFO] Starting step",
            f"tinker_cookbook.utils.misc_utils:23 [INFO] step took {seconds} seconds",
        ]
    run = load_run(_write(tmp_path / "run" / "logs.log", *lines).parent)
    assert run.steps["time/step"].to_list() == [5.0, 6.0, 7.0]
    (metrics,) = [i for i in run.inputs if i.kind == "metrics"]
    assert metrics.records == 3 and "timeline" in metrics.note


def test_garbage_capture_never_crashes(tmp_path):
    lines = ["┏━━━┳━━━┓", "┃ Metric ┃ Value ┃", "│ │ │", "│ a │", "┡━╇━┩", "│ x │ 1 │ 2 │", "Step 99999999999999999999"]
    run = load_run(_write(tmp_path / "run" / "logs.log", "root:1 [INFO] hello", *lines * 3).parent)
    assert run.records_read > 0


# --- acceptance: a console capture alone gives the same findings as metrics.jsonl -------------------


def _finding_keys(result) -> list[tuple[str, str, tuple[int, ...]]]:
    return sorted((f.rule, f.severity, tuple(f.steps)) for f in result.findings)


def _assert_same_findings(with_metrics: Path, console_only: Path) -> None:
    a, b = analyze(load_run(with_metrics)), analyze(load_run(console_only))
    assert a.run.steps.height == b.run.steps.height
    assert a.run.meta.trainer == b.run.meta.trainer != "unknown"
    assert _finding_keys(a) == _finding_keys(b)

    def order(f):
        return (f.rule, f.severity, tuple(f.steps))

    for fa, fb in zip(sorted(a.findings, key=order), sorted(b.findings, key=order), strict=True):
        lost_a, lost_b = fa.seconds_lost, fb.seconds_lost
        if lost_a is not None:
            assert lost_b == pytest.approx(lost_a, rel=1e-3, abs=1e-3)
    for key in ("step_time_p50_s", "steady_step_time_s", "warmup_steps"):
        if a.summary.get(key) is not None:
            assert b.summary[key] == pytest.approx(a.summary[key], rel=1e-3, abs=1e-5)


def _console_pair(source: Path, tmp_path: Path, *, colour: bool, metric_width: int | None) -> tuple[Path, Path]:
    """The fixture with its rows also printed as console tables (after each `Wrote metrics` line, as the
    cookbook logs them), and the same without metrics.jsonl."""
    both = tmp_path / "both"
    shutil.copytree(source, both)
    tables = []
    for line in (source / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line the run cut short: not printed either
        step = row.pop("step", None)
        tables.append(metrics_table_record(row, step, colour=colour, metric_width=metric_width))
    log = both / "logs.log"
    pending = iter(tables)
    out = []
    for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else []:
        out.append(line)
        if "Wrote metrics to" in line and (table := next(pending, None)) is not None:
            out.append(table)
    out.extend(pending)
    log.write_text("\n".join(out) + "\n", encoding="utf-8")
    console = tmp_path / "console"
    shutil.copytree(both, console)
    for path in console.glob("metrics.jsonl*"):
        path.unlink()
    return both, console


@pytest.mark.parametrize(
    ("fixture", "colour", "metric_width"),
    [
        ("runs/demo", False, None),
        ("runs/sl_gil_stall", True, None),
        ("runs/rl_async_stream_starved", True, 30),
        ("runs/rl_kl_step0", False, None),
        ("runs/sl_resumed", False, None),
        ("training/rl_sync_truncated_rollouts", True, 30),
        ("training/rl_async_stale", False, None),
        ("training/rl_sync_saturated_midway", False, None),
        ("training/distill_on_policy_healthy", False, None),
        ("training/sft_nan_loss", False, None),
    ],
)
def test_fixture_console_capture_gives_the_findings_of_its_metrics(fixture, colour, metric_width, tmp_path):
    source = ROOT / "fixtures" / fixture
    if not (source / "metrics.jsonl").exists():
        pytest.skip(f"fixture {fixture} has not been generated (make fixtures)")
    _assert_same_findings(*_console_pair(source, tmp_path, colour=colour, metric_width=metric_width))


CORPUS_PAIRS = [
    "sushantmehta-tinker-cookbook/logs_v2",  # W&B output.log only (no logs.log), ANSI, keys cut at 30
    "sushantmehta-tinker-cookbook/logs",
    *(
        f"bzz-tinker-cookbook/data/context_distillation/logs/{name}"
        for name in ("exp1_off_policy", "exp2_on_policy", "exp3_combo", "exp4_reward_only", "exp5_reward_and_kl")
    ),
]


def _corpus_run(relative: str) -> Path:
    if CORPUS is None or not (CORPUS / relative).exists():
        pytest.skip(CORPUS_MISSING)
    return CORPUS / relative


@pytest.mark.parametrize("relative", CORPUS_PAIRS)
@pytest.mark.parametrize("with_config", [True, False], ids=["config", "no-config"])
def test_corpus_console_capture_gives_the_findings_of_its_metrics(relative, with_config, tmp_path):
    source = _corpus_run(relative)
    both, console = tmp_path / "both", tmp_path / "console"
    shutil.copytree(source, both)
    if not with_config:
        (both / "config.json").unlink(missing_ok=True)  # the trainer then comes from the metric keys
    shutil.copytree(both, console)
    (console / "metrics.jsonl").unlink()
    _assert_same_findings(both, console)


def test_corpus_output_log_values_match_metrics_jsonl(tmp_path):
    source = _corpus_run("sushantmehta-tinker-cookbook/logs_v2")
    console = tmp_path / "console"
    shutil.copytree(source, console)
    (console / "metrics.jsonl").unlink()
    printed, logged = load_run(console).steps, load_run(source).steps
    assert printed.height == logged.height == 29
    shared = [c for c in logged.columns if logged.schema[c].is_float() and not c.endswith((":total", ":count"))]
    # Every key the table shows, cut ones (`test/env/all/by_group/frac_al…`) mapped back in full.
    assert not [c for c in printed.columns if c.endswith("…")]
    assert set(shared) <= set(printed.columns)
    for column in shared:
        for mine, theirs in zip(printed[column].to_list(), logged[column].to_list(), strict=True):
            assert (mine is None) == (theirs is None), column
            if theirs is not None and not math.isnan(theirs):
                assert mine == pytest.approx(theirs, abs=5.01e-7), column
