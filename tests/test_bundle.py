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

from trace_doctor.api import analyze, load_run
from trace_doctor.model import LOG_EVENTS_SCHEMA
from trace_doctor.redact import REDACTED, is_secret_key, redact_text, redact_value
from trace_doctor.report.bundle import safe_member, write_bundle


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
