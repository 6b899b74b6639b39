"""Runs and sweeps: what a run is, and a folder of runs analysed run by run, never merged."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CORPUS, CORPUS_MISSING, fixture_run

from trace_doctor.api import load_run
from trace_doctor.cli import main
from trace_doctor.fleet import analyze_sources
from trace_doctor.report.json_doc import build_document
from trace_doctor.runs import run_prefix, split_runs
from trace_doctor.settings import Settings


def metrics(path, steps=3, total=2.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": i, "time/total": total}) + "\n" for i in range(steps)))
    return path


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("metrics.jsonl", ""),
        ("metrics.jsonl.pre_resume_2", ""),
        ("arithmetic_metrics.jsonl", "arithmetic"),
        ("distillation_off_checkpoints.jsonl", "distillation_off"),
        ("gptoss-20b-v2-metrics.jsonl", "gptoss-20b-v2"),
        ("training_metrics.jsonl", "training"),
        ("run7.jsonl", "run7"),
    ],
)
def test_the_run_name_a_file_carries(name, prefix, tmp_path):
    assert run_prefix(tmp_path / name) == prefix


def test_a_sweep_folder_splits_into_its_runs_and_nothing_is_merged(tmp_path):
    metrics(tmp_path / "lr_1e-4" / "metrics.jsonl")
    (tmp_path / "lr_1e-4" / "config.json").write_text('{"learning_rate": 1e-4}')
    metrics(tmp_path / "lr_1e-4" / "wandb" / "run-1" / "files" / "metrics_dump.jsonl")
    (tmp_path / "lr_1e-4" / "wandb" / "run-1" / "files" / "output.log").write_text("x:1 [INFO] hello\n")
    metrics(tmp_path / "lr_3e-4" / "metrics.jsonl")
    metrics(tmp_path / "renamed" / "a_metrics.jsonl")
    metrics(tmp_path / "renamed" / "b_metrics.jsonl")
    split = split_runs([tmp_path])
    labels = sorted(r.label for r in split.runs)
    assert labels == ["lr_1e-4", "lr_1e-4/wandb/run-1/files", "lr_3e-4", "renamed/a*", "renamed/b*"]
    by_label = {r.label: r for r in split.runs}
    # the W&B capture has no run file of its own folder's... it holds a metrics file, so it is a run;
    # the output.log beside it belongs to that run, not to lr_1e-4.
    assert {p.name for p in by_label["lr_1e-4"].files} == {"metrics.jsonl", "config.json"}
    assert {p.name for p in by_label["renamed/a*"].files} == {"a_metrics.jsonl"}
    assert len({r.run_id for r in split.runs}) == len(split.runs)
    assert all("/" not in r.run_id for r in split.runs)


def test_files_without_a_run_of_their_own_join_the_run_folder_above(tmp_path):
    metrics(tmp_path / "run" / "metrics.jsonl")
    (tmp_path / "run" / "wandb" / "files").mkdir(parents=True)
    (tmp_path / "run" / "wandb" / "files" / "output.log").write_text("tinker:1 [INFO] started\n")
    (split_run,) = split_runs([tmp_path]).runs
    assert {p.name for p in split_run.files} == {"metrics.jsonl", "output.log"}
    assert split_run.whole_folder  # one run: ingested as the folder it is, as before


def test_loose_files_named_together_are_one_run(tmp_path):
    a = metrics(tmp_path / "x" / "metrics.jsonl")
    b = metrics(tmp_path / "y" / "other_metrics.jsonl")
    (run,) = split_runs([a, b]).runs
    assert run.files == (a, b)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    for name in ("sl_sequential_await", "sl_healthy_pipelined", "rl_kl_step0"):
        shutil.copytree(fixture_run(name), root / name)
    return root


FORMATS = ("text", "json", "markdown", "junit", "sarif")


def invoke(*args):
    return CliRunner().invoke(main, ["analyze", "--no-html", "--jobs", "1", *args], catch_exceptions=False)


def test_each_run_of_a_folder_gets_the_document_it_gets_alone(sweep):
    fleet = json.loads(invoke(str(sweep), "--format", "json").stdout)
    assert set(fleet) == {"schema_version", "tool", "runs", "fleet"}
    assert fleet["fleet"]["runs"] == 3
    for document in fleet["runs"]:
        alone = json.loads(invoke(document["run"]["path"], "--format", "json").stdout)
        assert document == alone


def test_the_gate_trips_when_any_run_trips_it_in_every_format(sweep):
    gated = {fmt: invoke(str(sweep), "--fail-on", "warning", "--format", fmt) for fmt in FORMATS}
    for fmt, result in gated.items():
        assert result.exit_code == 1, fmt
    markdown = gated["markdown"].stdout
    assert "**Gate: FAILED**" in markdown and markdown.count("<details><summary><code>") == 3
    suites = ET.fromstring(gated["junit"].stdout)
    assert sorted(s.get("name") for s in suites.iter("testsuite")) == sorted(
        ["sl_sequential_await", "sl_healthy_pipelined", "rl_kl_step0"]
    )
    assert int(suites.get("failures")) > 0
    sarif = json.loads(invoke(str(sweep), "--format", "sarif").stdout)
    assert len(sarif["runs"]) == 3
    healthy = invoke(str(sweep / "sl_healthy_pipelined"), str(sweep / "sl_healthy_pipelined"), "--fail-on", "error")
    assert healthy.exit_code == 0


def test_the_fleet_table_puts_runs_that_need_attention_first(sweep):
    fleet = analyze_sources(split_runs([sweep]).runs, Settings(), jobs=1)
    assert [r.status for r in fleet.reports] == sorted(
        (r.status for r in fleet.reports),
        key=lambda s: ["error", "warning", "failed", "info", "limited", "clear"].index(s),
    )
    text = invoke(str(sweep)).stdout
    assert text.index("sl_sequential_await") < text.index("sl_healthy_pipelined")


def test_parallel_workers_give_the_same_fleet(sweep):
    one = invoke(str(sweep), "--format", "json").stdout
    two = CliRunner().invoke(main, ["analyze", "--no-html", "--jobs", "2", str(sweep), "--format", "json"]).stdout
    assert one == two


@pytest.mark.skipif(not CORPUS.exists(), reason=CORPUS_MISSING)
@pytest.mark.parametrize("folder", ["tinker-rl-lab", "joanvelja-tinker-cookbook", "sushantmehta-tinker-cookbook"])
def test_corpus_folders_give_per_run_verdicts_that_match_each_run_alone(folder):
    sources = split_runs([CORPUS / folder]).runs
    assert len(sources) > 1
    fleet = analyze_sources(sources, Settings(), jobs=1)
    for report in fleet.reports:
        source = report.source
        alone = load_run(*source.files) if not source.whole_folder else load_run(source.root)
        from trace_doctor.api import analyze

        result = analyze(alone)
        document = build_document(result)
        document["run"]["path"] = report.document["run"]["path"]
        assert report.document == document, source.label
    trainers = sorted(r.document["run"]["trainer"] for r in fleet.reports)
    if folder == "tinker-rl-lab":
        assert trainers == ["distillation", "rl", "sl"]  # three runs, three trainers: never one merged run


def test_a_bundle_or_export_of_a_folder_of_runs_asks_for_one(sweep, tmp_path):
    for command in (
        ["bundle", str(sweep), "-o", str(tmp_path / "b.zip")],
        ["export", str(sweep), "--chrome-json", "x"],
    ):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2 and "holds 3 runs; name one of them" in result.output


def test_a_hostile_folder_of_runs_is_analysed_without_a_traceback(tmp_path):
    root = tmp_path / "hostile"
    shutil.copytree(fixture_run("sl_healthy_pipelined"), root / "run <img src=x>")
    metrics(root / "gz" / "metrics.jsonl")
    (root / "gz" / "trace_events.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00not deflate at all" * 8)
    odd = root.as_posix().encode() + b"/run\xffbad"  # a folder name that is not UTF-8
    os.makedirs(odd)
    with open(odd + b"/metrics.jsonl", "w") as fh:
        fh.write('{"step": 0, "time/total": 1.0}\n')
    deep = root.joinpath(*["d"] * 12)
    metrics(deep / "metrics.jsonl")
    html = tmp_path / "out" / "overview.html"
    result = CliRunner().invoke(
        main, ["analyze", str(root), "--html", str(html), "--format", "json", "--jobs", "1"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    reasons = [p["reason"] for r in document["runs"] for p in r["run"]["passed_over"]]
    assert any(r.startswith("corrupt gzip") for r in reasons)
    assert any("levels below" in p["reason"] for p in document["fleet"]["passed_over"])  # said, not dropped
    assert "run\ufffdbad" in [row["run"] for row in document["fleet"]["table"]]  # shown, its bad byte replaced
    assert html.exists() and "<img src=x>" not in html.read_text()


def test_row_leads_with_the_training_cause_not_the_symptom_it_explains():
    # Qwen3-8B trained with the llama3 renderer: the high step-0 KL (TD201) is the renderer's symptom.
    run = Path(__file__).resolve().parent.parent / "fixtures" / "training" / "config_renderer_llama3_on_qwen3"
    (report,) = analyze_sources(split_runs([run]).runs, Settings(), jobs=1).reports
    assert report.main_finding["rule"] == "renderer-model-mismatch"
    assert report.quality_finding is None  # it is the main finding already


def test_run_ids_that_clean_to_one_another_stay_apart_in_the_dataset(tmp_path):
    # `x y` and `x_y` both clean to `x_y`; the repeat must not take `x_y-2`, a third run's own id,
    # or that run's partition (and report file) is overwritten by another run's data.
    for name, steps in (("x y", 3), ("x_y", 4), ("x_y-2", 5)):
        metrics(tmp_path / "runs" / name / "metrics.jsonl", steps=steps)
    ids = [r.run_id for r in split_runs([tmp_path / "runs"]).runs]
    assert len(set(ids)) == 3, ids
    out = tmp_path / "dataset"
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "runs"), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    partitions = sorted(p.name for p in (out / "steps").iterdir())
    assert len(partitions) == 3, partitions
    import polars as pl

    rows = pl.scan_parquet(out / "steps", hive_partitioning=True).collect()
    assert sorted(rows.group_by("run").len()["len"].to_list()) == [3, 4, 5]


def test_a_baseline_that_holds_several_runs_is_refused_not_merged(sweep):
    # Read as one run, the sweep's three runs would be merged into one baseline and compared as such.
    for candidate in (str(fixture_run("sl_healthy_pipelined")), str(sweep)):
        result = CliRunner().invoke(
            main, ["analyze", "--no-html", "--jobs", "1", "--format", "json", "--baseline", str(sweep), candidate]
        )
        assert result.exit_code == 2, result.output
        assert "baseline:" in result.stderr and "holds 3 runs" in result.stderr
        assert result.stdout == ""


@pytest.mark.parametrize("columns", ["80", "120", "200"])
def test_the_fleet_table_fits_the_terminal_with_every_column_whole(tmp_path, columns):
    # Short run names once left the run column at its 32-character minimum, which rich meets after
    # fitting the table: the last column was pushed off the edge (`5.27 s` printed as `5.2`). The table
    # was then drawn 120 wide whatever $COLUMNS said (30 of 31 lines over 80, names split mid-word).
    copies = {
        "sl_gil_stall": "sl_gil_stall",
        "rl_kl_step0": "rl_kl_step0",
        "a_long_sweep_folder/lr_3e-4_batch_128_seed_17_qwen3": "sl_steady_slow",
    }
    for name, fixture in copies.items():
        shutil.copytree(fixture_run(fixture), tmp_path / name)
    names = list(copies)
    env = {"COLUMNS": columns, "NO_COLOR": "1"}
    runner = CliRunner()
    text = runner.invoke(main, ["analyze", "--no-html", "--jobs", "1", str(tmp_path)], env=env).stdout
    document = json.loads(
        runner.invoke(main, ["analyze", "--no-html", "--jobs", "1", "--format", "json", str(tmp_path)], env=env).stdout
    )
    lines = text.splitlines()
    assert all(len(line) <= int(columns) for line in lines), max(lines, key=len)
    for name in names:  # every run's name whole on one line
        assert any(name in line for line in lines), name
    if int(columns) >= 200:
        header = next(line for line in lines if line.startswith("run "))
        assert header.split()[-1] == "lost"
    from trace_doctor.humanize import format_seconds

    lost = [format_seconds(row["seconds_lost"]) for row in document["fleet"]["table"] if row["seconds_lost"]]
    assert lost and all(value in text for value in lost)


def test_a_run_folder_holding_another_run_is_one_run_for_bundle_export_and_baseline(tmp_path):
    # A run's folder with an earlier attempt copied inside it: `bundle parent` answered "parent holds 2 runs;
    # name one of them (parent, ...)" — naming it again looped. One-run commands read the folder's own run,
    # without the nested run's files; `analyze` still reports both runs apart.
    parent = tmp_path / "parent"
    shutil.copytree(fixture_run("sl_healthy_pipelined"), parent)
    shutil.copytree(fixture_run("sl_steady_slow"), parent / "attempt1")
    bundle = tmp_path / "b.zip"
    result = CliRunner().invoke(main, ["bundle", str(parent), "-o", str(bundle)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    import zipfile

    document = json.loads(zipfile.ZipFile(bundle).read("findings.json"))
    assert document["run"]["steps"] == 30
    # The bundle names the run's files relative to its folder: the parent's own, none of attempt1's.
    paths = [i["path"] for i in document["run"]["inputs"]]
    assert paths and all(not Path(p).is_absolute() and "attempt1" not in p for p in paths)
    chrome = tmp_path / "t.json"
    result = CliRunner().invoke(main, ["export", str(parent), "--chrome-json", str(chrome)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        main,
        ["analyze", "--no-html", "--format", "json", "--baseline", str(parent), str(fixture_run("sl_steady_slow"))],
        catch_exceptions=False,
    )
    assert result.exit_code == 1, result.output  # sl_steady_slow regressed against the parent's own run
    block = json.loads(result.stdout)["baseline"]
    assert block["path"] == str(parent) and block["statistics"]["n_baseline"] == 29
    runs = json.loads(CliRunner().invoke(main, ["analyze", "--no-html", "--format", "json", str(parent)]).stdout)
    assert sorted(r["run"]["steps"] for r in runs["runs"]) == [30, 30]


def test_a_run_named_directly_and_inside_a_named_folder_is_analysed_once(tmp_path):
    # `ingest sweep sweep/run_b` (or overlapping globs) analysed run_b twice: the fleet counted it twice and the
    # dataset held its rows under two run ids.
    sweep = tmp_path / "sweep"
    shutil.copytree(fixture_run("sl_healthy_pipelined"), sweep / "run_a")
    shutil.copytree(fixture_run("sl_steady_slow"), sweep / "run_b")
    split = split_runs([sweep, sweep / "run_b"])
    assert [run.label for run in split.runs] == ["sweep/run_a", "sweep/run_b"]
    assert [(p.path, p.reason) for p in split.passed_over] == [
        (str(sweep / "run_b"), "a run named twice: analysed once, as sweep/run_b")
    ]
    out = tmp_path / "dataset"
    result = CliRunner().invoke(main, ["ingest", str(sweep), str(sweep / "run_b"), "--out", str(out), "-j", "1"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["run=sweep__run_a", "run=sweep__run_b"]
    assert len(split_runs([sweep / "run_a", sweep / "run_a"]).runs) == 1
