"""The training machine as the run recorded it: W&B metadata, pip freeze, code.diff, SDK ids — in the
analysis JSON and the escalation bundle, redacted, with the analysing machine kept apart."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import orjson
from click.testing import CliRunner
from conftest import CORPUS
from planted_secrets import SECRETS

from trace_doctor.api import analyze, load_run
from trace_doctor.cli import main
from trace_doctor.ingest.parsers.wandb_metadata import parse_wandb_metadata_files
from trace_doctor.model import IngestWarning
from trace_doctor.redact import REDACTED, redact_argv

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "fixtures" / "training" / "rl_wandb_machine"
FILES = "wandb/run-20261101_120000-abcd1234/files"


def bundle_members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def test_wandb_metadata_is_run_metadata():
    run = load_run(RUN)
    (wandb,) = run.meta.wandb
    assert wandb.wandb_run_id == "abcd1234"
    assert wandb.python == "3.12.11"  # wandb-core writes "CPython 3.12.11"
    assert wandb.host == "train-box-07"
    assert wandb.git_commit.startswith("9b2f4c61")
    assert (wandb.cpu_count, wandb.cpu_count_logical, wandb.memory_total_bytes) == (16, 32, 137438953472)
    assert "max_tokens=2048" in wandb.args
    assert any(i.kind == "wandb_metadata" and i.records == 1 for i in run.inputs)


def test_training_machine_gathers_every_source():
    machine = analyze(load_run(RUN)).summary["training_machine"]
    assert machine["recorded"] is True
    assert machine["session_ids"] == ["5e0c9d1a-2b3c-4d5e-8f60-718293a4b5c6"]
    assert machine["training_run_ids"] == ["7c1d2e3f-4a5b-5c6d-8e9f-0a1b2c3d4e5f:train:0"]
    assert machine["cookbook"] == [
        {
            "repo": "/home/user/tinker-cookbook",
            "commit": "9b2f4c61d0e83a7b5c1e2d3f4a5b6c7d8e9f0a1b",
            "source": str(RUN / "code.diff"),
        }
    ]
    (freeze,) = machine["pip_freeze"]
    assert freeze["packages"] == 33
    reported = {v["package"]: v["version"] for v in machine["versions"]}
    # The packages that matter are named; the rest of the freeze is counted, not listed.
    assert reported["tinker"] == "0.40.1" and reported["pydantic"] == "2.11.9" and reported["torch"] == "2.10.0"
    assert "aiohttp" not in reported and "pyyaml" not in reported
    assert all(v["evidence"] == "pip freeze" for v in machine["versions"])


def test_nothing_recorded_is_said(tmp_path):
    run = tmp_path / "bare"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0, "time/total": 1.0}\n{"step": 1, "time/total": 1.0}\n')
    machine = analyze(load_run(run)).summary["training_machine"]
    assert machine["recorded"] is False and machine["wandb"] == [] and machine["versions"] == []


def test_environment_check_lines_are_the_training_machine(tmp_path):
    """Version lines a user pasted (the debug skill's environment check) count, whatever the package."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("wandb"))
    (run / "env_check.txt").write_text("Python: 3.11.9\npydantic: 2.13.0b2\ntorch: 2.10.0\n")
    machine = analyze(load_run(run)).summary["training_machine"]
    found = {(v["package"], v["version"]) for v in machine["versions"]}
    assert {("python", "3.11.9"), ("pydantic", "2.13.0b2"), ("torch", "2.10.0")} <= found
    assert machine["pip_freeze"] == []


def test_bad_metadata_is_a_warning_and_the_rest_is_kept(tmp_path):
    broken = tmp_path / "a" / "wandb-metadata.json"
    listed = tmp_path / "b" / "wandb-metadata.json"
    odd = tmp_path / "c" / "wandb-metadata.json"
    for path, text in (
        (broken, '{"python": "3.11'),
        (listed, "[1, 2]"),
        (odd, json.dumps({"python": 3.11, "args": "not a list", "cpu_count": "many", "host": ["x"], "os": "Linux"})),
    ):
        path.parent.mkdir(parents=True)
        path.write_text(text)
    warnings: list[IngestWarning] = []
    found, infos = parse_wandb_metadata_files([broken, listed, odd], warnings)
    assert [w.problem.split(":")[0] for w in warnings] == [
        "W&B metadata is not valid JSON",
        "W&B metadata is a JSON list, expected an object",
    ]
    assert [(i.records, i.skipped) for i in infos] == [(0, 1), (0, 1), (1, 0)]
    (kept,) = found
    assert (kept.python, kept.args, kept.cpu_count, kept.host, kept.os) == (None, (), None, None, "Linux")


def test_older_wandb_shape(tmp_path):
    path = tmp_path / "wandb" / "run-20250101_010203-zz9" / "files" / "wandb-metadata.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "os": "Linux-5.15",
                "python": "3.10.12",
                "heartbeatAt": "2025-01-01T01:02:10",
                "startedAt": "2025-01-01T01:02:03",
                "cuda": "12.1",
                "args": [],
                "state": "running",
                "gpu": "NVIDIA A100-SXM4-80GB",
                "gpu_count": 8,
            }
        )
    )
    (meta,) = parse_wandb_metadata_files([path], [])[0]
    assert (meta.wandb_run_id, meta.python, meta.cuda_version, meta.gpu, meta.gpu_count) == (
        "zz9",
        "3.10.12",
        "12.1",
        "NVIDIA A100-SXM4-80GB",
        8,
    )


def test_argv_redaction_reads_a_flag_with_its_value():
    key = SECRETS["openai"]
    assert redact_argv(["--api-key", key, "--lr", "1e-4", f"--token={SECRETS['github']}", "--max-tokens", "512"]) == (
        "--api-key",
        REDACTED,
        "--lr",
        "1e-4",
        f"--token={REDACTED}",
        "--max-tokens",
        "512",
    )


def test_planted_keys_in_wandb_metadata_never_reach_the_bundle(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    metadata = run / FILES / "wandb-metadata.json"
    doc = json.loads(metadata.read_text())
    doc["args"] += [
        "--wandb-api-key",
        SECRETS["wandb"],
        f"api_key={SECRETS['tinker']}",
        "--hf_token",
        SECRETS["huggingface"],
        f"--openai-key={SECRETS['openai']}",
    ]
    doc["git"]["remote"] = f"https://trainer:{SECRETS['url_password']}@github.com/acme/cookbook.git"
    metadata.write_text(json.dumps(doc))
    out = tmp_path / "bundle.zip"
    result = CliRunner().invoke(main, ["bundle", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    members = bundle_members(out)
    for name, data in members.items():
        for label in ("wandb", "tinker", "huggingface", "openai", "url_password"):
            assert SECRETS[label].encode() not in data, f"{label} key in {name}"
    summary = members["SUMMARY.md"].decode()
    assert "## Training machine (as the run recorded it)" in summary
    assert "host: train-box-07" in summary and "`3.12.11`" in summary
    assert "--wandb-api-key [REDACTED]" in summary
    assert "## Analysed on (the machine that ran trace-doctor, not the training machine)" in summary
    # The training machine comes first; the analysing machine's section is its own.
    assert summary.index("## Training machine") < summary.index("## Analysed on")
    recorded = orjson.loads(members["training_machine.json"])
    assert len(recorded["all_versions"]) >= 33 and recorded["session_ids"]
    document = orjson.loads(members["findings.json"])
    assert document["summary"]["training_machine"]["wandb"][0]["host"] == "train-box-07"


def test_corpus_wandb_folders_hold_console_output_only():
    """The corpus' two W&B folders keep only output.log: no metadata, so nothing is invented."""
    run = CORPUS / "sushantmehta-tinker-cookbook" / "logs_v2"
    if not run.exists():
        import pytest

        pytest.skip("the real-run corpus ../shared/corpus is not present on this machine (CI has it)")
    loaded = load_run(run)
    assert loaded.meta.wandb == []
    machine = analyze(loaded).summary["training_machine"]
    assert all(v["source"] for v in machine["versions"])
