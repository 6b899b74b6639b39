"""The result cache answers an unchanged run with exactly the output of a fresh analysis, without
reading its tables, and never answers when an input, the code or a setting changed."""

from __future__ import annotations

import os
import pickle
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, fixture_run, isolated_cache

import trace_doctor.api as api
from trace_doctor import result_cache
from trace_doctor.cli import main
from trace_doctor.settings import Settings

FORMATS = ("json", "text", "markdown", "junit", "sarif")
TRAINING = ROOT / "fixtures" / "training"


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """A cache folder of its own that takes any run, and a count of the fresh analyses."""
    isolated_cache(tmp_path, monkeypatch)
    monkeypatch.setattr(result_cache, "MIN_INPUT_BYTES", 0)
    fresh = []
    analyze = api.analyze

    def counted(*args, **kwargs):
        fresh.append(args)
        return analyze(*args, **kwargs)

    monkeypatch.setattr(api, "analyze", counted)
    return fresh


def run_copy(source: Path, tmp_path: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(source, tmp_path / name))


def invoke(*args: str):
    return CliRunner().invoke(main, ["analyze", "--no-html", *args])


def no_tables(monkeypatch):
    """From here on, reading a run fails: whatever still answers came from the cache alone."""

    def refused(*args, **kwargs):
        raise AssertionError("a table was read")

    monkeypatch.setattr(api, "load_run", refused)
    monkeypatch.setattr(api, "analyze", refused)


def entries(tmp_path: Path) -> list[Path]:
    root = tmp_path / "cache"
    return sorted(root.glob("analysis-*.json")) if root.exists() else []


CASES = {
    "timing run": (lambda: fixture_run("sl_gil_stall"), ()),
    "training run": (lambda: TRAINING / "rl_async_stale", ()),
    "baseline comparison": (
        lambda: TRAINING / "quality_rl_reward_drop",
        ("--baseline", str(TRAINING / "quality_rl_baseline"), "--fail-on", "warning"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stored_analysis_renders_every_format_exactly_as_a_fresh_one(case, stored, tmp_path, monkeypatch):
    source, options = CASES[case]
    run = run_copy(source(), tmp_path)
    cold = {fmt: invoke(str(run), "--format", fmt, *options) for fmt in FORMATS}
    assert len(stored) == 1 and len(entries(tmp_path)) == 1  # one analysis, stored once, for every format
    no_tables(monkeypatch)
    for fmt in FORMATS:
        warm = invoke(str(run), "--format", fmt, *options)
        assert (warm.exit_code, warm.stdout, warm.stderr) == (
            cold[fmt].exit_code,
            cold[fmt].stdout,
            cold[fmt].stderr,
        ), fmt
    assert cold["json"].exit_code in (0, 1)


def test_a_folder_of_runs_is_answered_run_by_run(stored, tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    for name in ("sl_sequential_await", "sl_healthy_pipelined"):
        shutil.copytree(fixture_run(name), sweep / name)
    shutil.copytree(TRAINING / "rl_async_stale", sweep / "rl_async_stale")
    cold = {fmt: invoke(str(sweep), "--jobs", "1", "--format", fmt) for fmt in ("json", "text", "junit")}
    assert len(entries(tmp_path)) == 3
    no_tables(monkeypatch)
    for fmt, result in cold.items():
        warm = invoke(str(sweep), "--jobs", "1", "--format", fmt)
        assert (warm.exit_code, warm.stdout, warm.stderr) == (result.exit_code, result.stdout, result.stderr), fmt


def test_renderers_that_need_the_tables_read_them_again(stored, tmp_path):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    outputs = []
    for name in ("cold", "warm"):
        html, chrome = tmp_path / f"{name}.html", tmp_path / f"{name}.json"
        report = CliRunner().invoke(main, ["analyze", str(run), "--format", "json", "--html", str(html)])
        export = CliRunner().invoke(main, ["export", str(run), "--chrome-json", str(chrome)])
        assert report.exit_code == 0 and export.exit_code == 0, (report.stderr, export.stderr)
        outputs.append((report.stdout, html.read_bytes(), chrome.read_bytes()))
    assert len(stored) == 1  # the second report and both exports were stored analyses
    assert outputs[0] == outputs[1]


def test_the_bundle_and_the_dataset_of_a_stored_analysis_are_those_of_a_fresh_one(stored, tmp_path):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    outputs = []
    for name in ("cold", "warm"):
        bundle, dataset = tmp_path / f"{name}.zip", tmp_path / f"{name}-dataset"
        assert CliRunner().invoke(main, ["bundle", str(run), "-o", str(bundle)]).exit_code == 0
        assert CliRunner().invoke(main, ["ingest", str(run), "--out", str(dataset)]).exit_code == 0
        with zipfile.ZipFile(bundle) as archive:
            members = {member: archive.read(member) for member in archive.namelist()}
        tables = {str(path.relative_to(dataset)): path.read_bytes() for path in dataset.rglob("*.parquet")}
        outputs.append((members, tables))
    assert len(stored) == 2  # the redacted analysis (bundle) and the fleet's (ingest), each once
    assert outputs[0] == outputs[1] and outputs[0][1]


def test_a_stored_run_reads_its_tables_once_and_only_when_asked(stored, tmp_path):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    request = result_cache.Request((str(run),), Settings())
    fresh = result_cache.cached(request, compute=lambda: api.analyze(api.load_run(run)), reload=None)
    reloads = []

    def reload():
        reloads.append(1)
        return api.load_run(run)

    answer = result_cache.cached(request, compute=None, reload=reload)
    assert isinstance(answer.run, result_cache.StoredRun) and reloads == []
    assert answer.run.steps.equals(fresh.run.steps) and reloads == []  # kept in the entry
    assert answer.run.spans.equals(fresh.run.spans) and len(answer.run.spans)
    assert answer.run.log_events.equals(fresh.run.log_events)
    assert reloads == [1]


def touch(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def same_size_edit(path: Path) -> None:
    """Change one byte, keeping the size and the mtime: only the content hash can tell."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    at = data.index(b'"step"')
    data[at + 1 : at + 5] = b"STEP"
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


CHANGES = {
    "an input touched": lambda run: touch(run / "metrics.jsonl"),
    "an input edited in place (same size, same mtime)": lambda run: same_size_edit(run / "metrics.jsonl"),
    "an input appended to": lambda run: (run / "metrics.jsonl").open("a").write('{"step": 999}\n'),
    "an input removed": lambda run: (run / "logs.log").unlink(),
    "an input added": lambda run: shutil.copy(run / "logs.log", run / "worker.log"),
    "a file passed over added": lambda run: (run / "notes.json").write_text('{"hello": 1}\n'),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_input_is_never_answered_from_the_cache(change, stored, tmp_path):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    first = invoke(str(run), "--format", "json")
    assert invoke(str(run), "--format", "json").stdout == first.stdout and len(stored) == 1
    CHANGES[change](run)
    after = invoke(str(run), "--format", "json")
    assert len(stored) == 2, "the changed run was analysed again"
    if change != "an input touched":
        assert after.stdout != first.stdout
    assert invoke(str(run), "--format", "json").stdout == after.stdout and len(stored) == 2  # and stored anew


def test_a_changed_baseline_is_never_answered_from_the_cache(stored, tmp_path):
    run = run_copy(TRAINING / "quality_rl_reward_drop", tmp_path)
    base = run_copy(TRAINING / "quality_rl_baseline", tmp_path, "base")
    invoke(str(run), "--baseline", str(base))
    invoke(str(run), "--baseline", str(base))
    assert len(stored) == 1
    same_size_edit(base / "metrics.jsonl")
    invoke(str(run), "--baseline", str(base))
    assert len(stored) == 2


SETTINGS = {
    "--select": ("--select", "gil-stall"),
    "--ignore": ("--ignore", "gil-stall"),
    "--fail-on": ("--fail-on", "warning"),
    "--fail-on-inconclusive": ("--fail-on-inconclusive",),
    # Redaction is the default: opting out is the setting that changes (and says so in the document).
    "--no-redact": ("--no-redact",),
}


@pytest.mark.parametrize("option", sorted(SETTINGS))
def test_a_changed_setting_is_never_answered_from_the_cache(option, stored, tmp_path):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    plain = invoke(str(run), "--format", "json")
    chosen = invoke(str(run), "--format", "json", *SETTINGS[option])
    assert len(stored) == 2
    again = invoke(str(run), "--format", "json", *SETTINGS[option])
    assert len(stored) == 2 and (again.stdout, again.exit_code) == (chosen.stdout, chosen.exit_code)
    # No baseline to be inconclusive about: the same document, looked up apart.
    if option != "--fail-on-inconclusive":
        assert (chosen.stdout, chosen.exit_code) != (plain.stdout, plain.exit_code)


def test_a_changed_threshold_in_the_configuration_file_is_never_answered(stored, tmp_path, monkeypatch):
    run = run_copy(fixture_run("sl_slow_get_batch"), tmp_path)
    config = tmp_path / "trace-doctor.toml"
    monkeypatch.chdir(tmp_path)
    config.write_text("[rules.get-batch-bottleneck]\nmin_share = 0.05\n")
    low = invoke(str(run), "--format", "json")
    config.write_text("[rules.get-batch-bottleneck]\nmin_share = 0.95\n")
    high = invoke(str(run), "--format", "json")
    assert len(stored) == 2 and low.stdout != high.stdout
    assert '"get-batch-bottleneck"' in low.stdout


def test_changed_code_is_never_answered_from_the_cache(stored, tmp_path, monkeypatch):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    invoke(str(run))
    invoke(str(run))
    assert len(stored) == 1
    monkeypatch.setattr(result_cache, "code_fingerprint", lambda: "another version of the package")
    invoke(str(run))
    assert len(stored) == 2


def test_the_code_fingerprint_covers_every_file_of_the_package_but_bytecode(tmp_path):
    package = Path(shutil.copytree(Path(result_cache.__file__).parent, tmp_path / "trace_doctor"))
    before = result_cache.tree_digest(package)
    (package / "__pycache__").mkdir(exist_ok=True)
    (package / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"compiled")
    assert result_cache.tree_digest(package) == before
    for edited in ("rules/engine.py", "templates/report.html.j2", "knowledge/__init__.py"):
        path = package / edited
        original = path.read_bytes()
        path.write_bytes(original + b"\n# changed\n")
        assert result_cache.tree_digest(package) != before, edited
        path.write_bytes(original)
    assert result_cache.tree_digest(package) == before
    (package / "policy" / "new_module.py").write_text("X = 1\n")
    assert result_cache.tree_digest(package) != before


CORRUPTIONS = {
    "truncated": lambda data: data[: len(data) // 2],
    "garbage": lambda data: b"\x00garbage" * 100,
    "empty": lambda data: b"",
    "another format": lambda data: b'{"format": "0", "key": "x"}\n' + data.split(b"\n", 1)[1],
    "a pickle": lambda data: pickle.dumps({"format": "2", "key": "x"}),
    "a function call": lambda data: b"cos\nsystem\n(S'echo owned'\ntR.",
    "an unknown class": lambda data: data.replace(b'"trace_doctor.decision.Gate"', b'"os._wrap_close"'),
    "an unknown form": lambda data: data.replace(b'"$":"tuple"', b'"$":"call"', 1),
    "a missing field": lambda data: data.replace(b'"fix":', b'"fixed":', 1),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_entry_is_a_miss_never_a_crash(corruption, stored, tmp_path):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    cold = invoke(str(run), "--format", "json")
    (entry,) = entries(tmp_path)
    entry.write_bytes(CORRUPTIONS[corruption](entry.read_bytes()))
    warm = invoke(str(run), "--format", "json")
    assert (warm.exit_code, warm.stdout, warm.stderr) == (cold.exit_code, cold.stdout, cold.stderr)
    assert len(stored) == 2
    invoke(str(run), "--format", "json")
    assert len(stored) == 2  # the entry was written again


class Poison:
    """Pickled, names a function that writes `marker`: run, it would leave the file behind."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "owned"))


@pytest.mark.parametrize("where", ["the entry", "the previous format's entry"])
def test_a_poisoned_pickle_in_the_cache_is_a_miss_and_runs_nothing(where, stored, tmp_path):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    cold = invoke(str(run), "--format", "json")
    (entry,) = entries(tmp_path)
    marker = tmp_path / "marker"
    target = entry if where == "the entry" else entry.with_suffix(".pickle")
    target.write_bytes(pickle.dumps({"format": "1", "key": "x", "payload": Poison(marker)}))
    warm = invoke(str(run), "--format", "json")
    assert (warm.exit_code, warm.stdout) == (cold.exit_code, cold.stdout)
    assert not marker.exists()
    assert len(stored) == (2 if where == "the entry" else 1)


def test_an_entry_for_another_key_is_not_read_past_its_header(stored, tmp_path, monkeypatch):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    invoke(str(run), "--format", "json")
    (entry,) = entries(tmp_path)
    header, body = entry.read_bytes().split(b"\n", 1)
    entry.write_bytes(b'{"format": "2", "key": "another run"}\n' + body)
    decoded = []
    monkeypatch.setattr(result_cache.plain_data, "loads", lambda raw: decoded.append(raw))
    invoke(str(run), "--format", "json")
    assert decoded == [] and len(stored) == 2


def test_cache_off_reads_and_writes_nothing(stored, tmp_path, monkeypatch):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    invoke(str(run))
    assert len(entries(tmp_path)) == 1
    monkeypatch.setenv("TRACE_DOCTOR_CACHE", "off")
    invoke(str(run))
    assert len(stored) == 2  # not read
    shutil.rmtree(tmp_path / "cache")
    invoke(str(run))
    assert entries(tmp_path) == [] and len(stored) == 3  # not written


def test_a_run_written_during_its_analysis_is_not_stored(stored, tmp_path):
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    request = result_cache.Request((str(run),), Settings())

    def analyse_while_written():
        result = api.analyze(api.load_run(run))
        with (run / "metrics.jsonl").open("a") as fh:
            fh.write('{"step": 999, "time/total": 1.0}\n')
        return result

    result_cache.cached(request, compute=analyse_while_written, reload=None)
    assert entries(tmp_path) == []


def test_small_runs_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACE_DOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRACE_DOCTOR_CACHE", raising=False)
    run = run_copy(fixture_run("sl_gil_stall"), tmp_path)
    assert result_cache.key(result_cache.Request((str(run),), Settings())) is None
    invoke(str(run))
    assert entries(tmp_path) == []
