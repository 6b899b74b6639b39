"""Escalation bundle: what support needs is there, no planted secret survives, names stay inside."""

from __future__ import annotations

import hashlib
import json
import zipfile

import polars as pl
import pytest
from ci_fixtures import SECRETS, step_times, write_sl_run
from click.testing import CliRunner
from conftest import fixture_run
from planted_secrets import NOT_SECRETS, leaks, write_secret_run

from trace_doctor.api import analyze, load_run
from trace_doctor.model import LOG_EVENTS_SCHEMA
from trace_doctor.redact import REDACTED, is_secret_key, redact_text, redact_value
from trace_doctor.report.bundle import safe_member, write_bundle
from trace_doctor.report.bundle_run_files import METRICS_MAX_BYTES


def members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory):
    """A run with keys planted in config, logs and environment-looking lines."""
    root = write_sl_run(tmp_path_factory.mktemp("secret") / "run", step_times(12, 1.0), secrets=True)
    result = analyze(load_run(root))
    # Log events as the log parser would keep them, secrets included (independent of its filters).
    planted = [
        f"TINKER_API_KEY={SECRETS['tinker']}",
        f"Authorization: Bearer {SECRETS['bearer']}",
        f"WANDB_API_KEY={SECRETS['wandb']}",
        f"using token {SECRETS['hf']}",
        "ServiceClient initialized for session sess-4f2a9c10-77aa",
    ]
    extra = pl.DataFrame(
        {
            "source": [str(root / "logs.log")] * 5,
            "line": [5, 6, 7, 8, 2],
            "kind": ["warning"] * 4 + ["session"],
            "message": planted,
            "fields": [
                json.dumps({"env": planted[0]}),
                None,
                None,
                None,
                json.dumps({"session_id": "sess-4f2a9c10-77aa"}),
            ],
        },
    )
    result.run.log_events = pl.concat([result.run.log_events, extra], how="diagonal_relaxed").cast(
        {k: v for k, v in LOG_EVENTS_SCHEMA.items() if k in ("source", "line", "kind", "message", "fields")}
    )
    return result


def test_no_planted_secret_byte_in_any_member(tmp_path, secret_run):
    archive = tmp_path / "bundle.zip"
    write_bundle(secret_run, archive)
    contents = members(archive)
    assert {"SUMMARY.md", "findings.json", "config.json", "report.html", "MANIFEST.json"} <= set(contents)
    for name, data in contents.items():
        for label, secret in SECRETS.items():
            assert secret.encode() not in data, f"{label} secret leaked into {name}"
    config = json.loads(contents["config.json"])
    assert config["api_key"] == REDACTED and config["hf_token"] == REDACTED and config["db_password"] == REDACTED
    assert config["wandb"]["api_key"] == REDACTED and config["wandb"]["project"] == "demo"
    assert config["max_tokens"] == 1024 and config["model_name"] == "Qwen/Qwen3-8B"  # not secrets


def test_manifest_hashes_every_member_and_names_stay_inside(tmp_path, secret_run):
    archive = tmp_path / "bundle.zip"
    manifest = write_bundle(secret_run, archive)
    contents = members(archive)
    listed = json.loads(contents["MANIFEST.json"])["files"]
    assert listed == manifest
    assert {m["path"] for m in manifest} == set(contents) - {"MANIFEST.json"}
    for entry in manifest:
        assert hashlib.sha256(contents[entry["path"]]).hexdigest() == entry["sha256"]
    for name in contents:
        assert not name.startswith("/") and ".." not in name.split("/")


def test_bundle_is_reproducible(tmp_path, secret_run):
    write_bundle(secret_run, tmp_path / "a.zip")
    write_bundle(secret_run, tmp_path / "b.zip")
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()


def test_support_summary_names_ids_timing_and_environment(tmp_path, secret_run):
    write_bundle(secret_run, tmp_path / "bundle.zip")
    summary = members(tmp_path / "bundle.zip")["SUMMARY.md"].decode()
    assert "sess-4f2a9c10-77aa" in summary and "ci-session-7" in summary
    assert "`run-abc123`" in summary  # from tinker:// checkpoint paths
    assert "steady (post-warm-up) median step" in summary
    assert "trace-doctor" in summary and "Python 3." in summary


def test_bundle_of_a_fixture_with_profiles_and_trace(tmp_path):
    run = fixture_run("sl_gil_stall")
    from trace_doctor.cli import main

    out = CliRunner().invoke(main, ["bundle", str(run), "-o", str(tmp_path / "b.zip")], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    contents = members(tmp_path / "b.zip")
    worst = json.loads(contents["trace/worst_steps.json"])
    assert any(e["ph"] == "X" for e in worst) and any(e["ph"] == "i" for e in worst)
    profiles = [n for n in contents if n.startswith("profiles/")]
    result = analyze(load_run(run))
    assert len(profiles) == result.run.frames["profile"].n_unique()
    document = json.loads(contents[profiles[0]])
    assert document["root_frame"]["function"] and document["root_frame"]["children"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("/etc/passwd", "etc/passwd"),
        ("../../evil.json", "evil.json"),
        ("profiles/..\\..\\x.json", "profiles/x.json"),
        ("a/./b c.json", "a/b_c.json"),
    ],
)
def test_safe_member_names(name, expected):
    assert safe_member(name) == expected


def test_redaction_keeps_what_is_not_a_secret():
    assert not is_secret_key("max_tokens") and not is_secret_key("tokenizer") and not is_secret_key("KeyError")
    assert is_secret_key("TINKER_API_KEY") and is_secret_key("db_password")
    # A weak word (`token`, `key`) names a secret only when the value looks like one.
    assert is_secret_key("hfToken", SECRETS["hf"]) and not is_secret_key("sort_key", "prompt_length")
    assert redact_text("KeyError: 'step'") == "KeyError: 'step'"
    assert redact_text("Saved tinker://run-1/weights/000020") == "Saved tinker://run-1/weights/000020"
    assert redact_value({"max_tokens": 512, "secret": {"a": "b"}}) == {"max_tokens": 512, "secret": {"a": REDACTED}}


# --- what support asks for: metrics, log tails, the slow steps' UTC window; bounded, relative, atomic ---

TRAINING_MACHINE_PATH = "/home/trainer/runs/planted"  # config.json's log_path: the training machine's fact


def bundle_of(run, archive) -> dict[str, bytes]:
    from trace_doctor.cli import main

    out = CliRunner().invoke(main, ["bundle", str(run), "-o", str(archive)], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return members(archive)


@pytest.fixture(scope="module")
def planted_bundle(tmp_path_factory):
    """The planted catalogue's run (every secret type in metrics, logs, config, trace, file names), bundled."""
    base = tmp_path_factory.mktemp("planted")
    run = write_secret_run(base / "run")
    config = json.loads((run / "config.json").read_text())
    config["log_path"] = TRAINING_MACHINE_PATH
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return base, bundle_of(run, base / "out" / "bundle.zip")


def test_planted_bundle_carries_no_secret_of_any_type(planted_bundle):
    _, contents = planted_bundle
    for name, data in contents.items():
        assert leaks(data) == [], f"{leaks(data)} leaked into {name}"
    text = b"".join(contents.values()).decode("utf-8", "replace")
    assert all(value in text for value in NOT_SECRETS.values())  # what support needs survives


def test_planted_bundle_has_metrics_log_tail_and_error_context(planted_bundle):
    _, contents = planted_bundle
    rows = [json.loads(line) for line in contents["metrics.jsonl"].splitlines()]
    assert [r["step"] for r in rows] == list(range(12))
    assert rows[0]["time/total"] == 6.0 and rows[3]["train_mean_nll"] == 0.25
    log = contents["logs/logs.log.txt"].decode()
    assert "## the last " in log and "      1| root:10 [INFO] Starting training" in log
    assert "--- error at line 57 ---" in log and "     57| root:99 [ERROR] RuntimeError: notify failed" in log
    assert REDACTED in log
    summary = contents["SUMMARY.md"].decode()
    assert "metrics.jsonl: all 12 rows from metrics.jsonl" in summary
    assert "logs/logs.log.txt" in summary
    # The log named after a key: its name was redacted, so it cannot be found again; the summary says so.
    assert "not readable now" in summary


def test_planted_bundle_says_why_there_is_no_utc_window(planted_bundle):
    _, contents = planted_bundle
    timing = json.loads(contents["timing/slow_steps_utc.json"])
    assert timing["basis"] is None and "perf_counter" in timing["note"] and "wall_time" in timing["note"]
    assert [s["step"] for s in timing["slow_steps"]] == [0, 1, 2]  # step 0 is the slow warm-up; ties: lower first
    assert "When the slowest steps ran (UTC)" in contents["SUMMARY.md"].decode()


def test_planted_bundle_names_no_path_of_the_analysing_machine(planted_bundle):
    base, contents = planted_bundle
    for name, data in contents.items():
        for spelling in (str(base), json.dumps(str(base))[1:-1], str(base).replace("/", "\\/")):
            assert spelling.encode() not in data, f"{name} names {spelling}"
    assert json.loads(contents["config.json"])["log_path"] == TRAINING_MACHINE_PATH  # the run's own fact, kept
    summary = contents["SUMMARY.md"].decode()
    assert "- log: `logs.log` (" in summary and "logs.log:57" in summary
    assert json.loads(contents["findings.json"])["run"]["path"] == "run"


def test_summary_asks_for_session_id_and_versions_only_when_missing(tmp_path):
    bare = write_sl_run(tmp_path / "bare", step_times(6, 1.0))
    config = json.loads((bare / "config.json").read_text())
    del config["session_name"]
    (bare / "config.json").write_text(json.dumps(config), encoding="utf-8")
    log = (bare / "logs.log").read_text().splitlines(keepends=True)
    (bare / "logs.log").write_text("".join(line for line in log if "session" not in line), encoding="utf-8")
    summary = bundle_of(bare, tmp_path / "bare.zip")["SUMMARY.md"].decode()
    assert "tc.get_info()" in summary and "pip show tinker tinker-cookbook" in summary

    known = write_sl_run(tmp_path / "known", step_times(6, 1.0))
    with (known / "logs.log").open("a", encoding="utf-8") as log:
        log.write("__main__:12 [INFO] tinker SDK: 0.6.1\n__main__:13 [INFO] tinker-cookbook: 0.3.0\n")
        log.write("__main__:14 [INFO] Python: 3.12.4\n")
    summary = bundle_of(known, tmp_path / "known.zip")["SUMMARY.md"].decode()
    assert "ci-session-7" in summary and "`0.6.1`" in summary and "`0.3.0`" in summary
    assert "tc.get_info()" not in summary and "pip show" not in summary


def test_utc_window_from_a_wall_clock_metric(tmp_path):
    run = write_sl_run(tmp_path / "run", step_times(8, 1.0), trace=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    start = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    clock = start
    for row in rows:
        clock += row["time/total"]
        row["wall_time"] = clock
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    timing = json.loads(bundle_of(run, tmp_path / "b.zip")["timing/slow_steps_utc.json"])
    assert timing["basis"].startswith("metric `wall_time`")
    first = timing["slow_steps"][0]
    assert first["step"] == 0 and first["start_utc"] == "2026-01-01T00:00:00+00:00"
    assert first["seconds"] == pytest.approx(rows[0]["time/total"])


def test_large_run_bundle_stays_bounded_and_says_what_it_cut(tmp_path):
    run = write_sl_run(tmp_path / "run", step_times(12, 1.0), trace=False)
    wide = {f"env/metric_{i:03d}": 0.123456789 for i in range(60)}
    with (run / "metrics.jsonl").open("w", encoding="utf-8") as out:
        for step in range(40_000):
            out.write(json.dumps({"step": step, "time/total": 1.0 + (step == 30_000), **wide}) + "\n")
    with (run / "logs.log").open("w", encoding="utf-8") as log:
        for line in range(200_000):
            log.write(f"root:{line} [INFO] step progress line {line} " + "x" * 200 + "\n")
        log.write("root:1 [INFO] " + "y" * 100_000 + "\n")  # one line longer than a display line
    contents = bundle_of(run, tmp_path / "b.zip")
    assert (tmp_path / "b.zip").stat().st_size < 8 * 2**20
    assert len(contents["metrics.jsonl"]) <= METRICS_MAX_BYTES
    steps = [json.loads(line)["step"] for line in contents["metrics.jsonl"].splitlines()]
    assert 30_000 in steps and steps[0] == 0 and steps[-1] == 39_999  # slow step, first and last rows kept
    assert "cut at 4 MiB" in contents["SUMMARY.md"].decode()
    log = contents["logs/logs.log.txt"].decode()
    assert len(log) < 600_000 and "[line cut: 100,014 characters]" in log and "200,001 lines" in log


def test_a_kill_while_writing_leaves_the_previous_bundle(tmp_path, secret_run, monkeypatch):
    archive = tmp_path / "bundle.zip"
    write_bundle(secret_run, archive)
    good = archive.read_bytes()
    written = []

    def killed(self, info, data, *args, **kwargs):
        written.append(info)
        if len(written) == 3:
            raise KeyboardInterrupt  # Ctrl-C (or any exception) half-way through the members
        return original(self, info, data, *args, **kwargs)

    original = zipfile.ZipFile.writestr
    monkeypatch.setattr(zipfile.ZipFile, "writestr", killed)
    with pytest.raises(KeyboardInterrupt):
        write_bundle(secret_run, archive)
    assert archive.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.zip"]  # no part file left behind
