"""Every command reads the configuration the same way, checks it when it loads, and applies it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import fixture_run

import trace_doctor
from trace_doctor.cli import main
from trace_doctor.policy import Policy, PolicyError
from trace_doctor.report.html import kl_band, render_html
from trace_doctor.settings import load_settings


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def write(tmp_path, text: str) -> str:
    path = tmp_path / "trace-doctor.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


BAD_CONFIGS = {
    "not a number": ('[rules.get-batch-bottleneck]\nmin_share = "abc"\n', "`min_share` must be a number"),
    "out of range": ("[rules.get-batch-bottleneck]\nmin_share = 1.5\n", "`min_share` must be a number ≥ 0 and ≤ 1"),
    "not a whole number": ("[rules.get-batch-bottleneck]\nmin_steady_steps = 2.5\n", "must be a whole number"),
    "a bool is not a number": ("[rules.kl-drift]\nmin_share_above = true\n", "`min_share_above` must be a number"),
    "unknown threshold": ("[rules.pipelining-gap]\nmin_idle_share = 0.2\n", "unknown threshold `min_idle_share`"),
    "unknown rule": ("[rules.no-such-rule]\nx = 1\n", "unknown rule `no-such-rule`"),
    "unknown shared knob": ("[shared]\nclock_cycle = 10\n", "unknown threshold `clock_cycle`"),
    "shared out of range": ("[shared]\nmax_warmup_share = 0\n", "max_warmup_share` must be a number > 0"),
    "moved knob out of range": ("[rules.warmup-slowness]\nmax_warmup_share = 2\n", "max_warmup_share must be"),
    "unknown top-level key": ('fail_onn = "warning"\n', "unknown key(s) 'fail_onn'"),
    "contradicting locations": (
        "[shared]\nmax_stable_kl = 0.02\n[rules.kl-drift]\nmax_kl = 0.05\n",
        "contradicts [tool.trace-doctor.shared] max_stable_kl",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_bad_configuration_is_an_error_naming_the_key_when_settings_load(tmp_path, case):
    text, message = BAD_CONFIGS[case]
    path = write(tmp_path, text)
    with pytest.raises(PolicyError, match=None) as caught:
        load_settings(path)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "--no-html"],
        ["export", "--chrome-json", "out.json"],
        ["bundle", "-o", "out.zip"],
    ],
    ids=lambda c: c[0],
)
def test_every_command_exits_2_on_a_bad_configuration(tmp_path, command):
    path = write(tmp_path, '[rules.get-batch-bottleneck]\nmin_share = "abc"\n')
    result = invoke(command[0], str(fixture_run("sl_slow_get_batch")), *command[1:], "--config", path)
    assert result.exit_code == 2
    assert "configuration error" in result.output and "`min_share` must be a number" in result.output


def test_rules_shows_the_thresholds_in_effect(tmp_path):
    path = write(tmp_path, "[rules.get-batch-bottleneck]\nmin_share = 0.3\n[shared]\nmax_warmup_share = 0.1\n")
    text = invoke("rules", "get-batch-bottleneck", "--config", path).output
    assert "min_share = 0.3  (default 0.2)" in text and "[share of steady step time; ≥ 0 and ≤ 1]" in text
    assert "max_warmup_share = 0.1  (default 0.25)" in text
    assert invoke("rules", "pipelining-gap").output.count("min_idle_share") == 0  # a dead knob is not advertised


def test_bundle_and_export_apply_the_configuration(tmp_path):
    run = str(fixture_run("sl_sequential_await"))
    path = write(tmp_path, 'ignore = ["pipelining-gap"]\n')
    for config in ([], ["--config", path]):
        out = tmp_path / f"bundle{len(config)}.zip"
        assert invoke("bundle", run, "-o", str(out), *config).exit_code == 0
        with zipfile.ZipFile(out) as archive:
            rules = {f["rule"] for f in json.loads(archive.read("findings.json"))["findings"]}
        assert ("pipelining-gap" in rules) is (not config)
        chrome = tmp_path / f"trace{len(config)}.json"
        assert invoke("export", run, "--chrome-json", str(chrome), *config).exit_code == 0
        names = {e.get("name") for e in json.loads(chrome.read_text())}
        assert ("pipelining-gap" in names) is (not config)


def test_the_warmup_cap_reaches_the_warmup_split_from_either_location():
    run = trace_doctor.load_run(fixture_run("sl_warmup_only"))
    default = trace_doctor.analyze(run)
    shared = trace_doctor.analyze(run, policy=Policy.from_config(shared={"max_warmup_share": 0.05}))
    legacy = trace_doctor.analyze(run, overrides={"warmup-slowness": {"max_warmup_share": 0.05}})
    assert default.summary["warmup_steps"] == 3
    assert shared.summary["warmup_steps"] == legacy.summary["warmup_steps"] == 1
    assert legacy.policy.notes and "[tool.trace-doctor.shared] max_warmup_share" in legacy.policy.notes[0]


def test_the_report_draws_the_kl_band_the_rules_used():
    run = trace_doctor.load_run(fixture_run("rl_kl_step0"))
    default = trace_doctor.analyze(run)
    wide = trace_doctor.analyze(run, policy=Policy.from_config(shared={"max_stable_kl": 0.5}))
    assert "renderer-kl-step0" in {f.rule for f in default.findings}
    assert "renderer-kl-step0" not in {f.rule for f in wide.findings}
    assert (kl_band(default), kl_band(wide)) == (0.01, 0.5)
    # The band's edge is a dashed line at the band in the embedded figure.
    edge = '"dash":"dash","width":1}},"type":"line","x0":0,"x1":1,"xref":"paper","y0":{band},"y1":{band}}}'
    assert edge.format(band=0.5) in render_html(wide) and edge.format(band=0.5) not in render_html(default)
    assert edge.format(band=0.01) in render_html(default)


def test_a_config_that_is_a_fifo_or_endless_is_a_usage_error_not_a_hang(tmp_path):
    fifo = tmp_path / "trace-doctor.toml"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.toml"
    huge.write_text("# " + "x" * (2 << 20) + "\n")
    run = fixture_run("sl_healthy_pipelined")
    for config in (fifo, "/dev/zero", huge):
        # A subprocess with a timeout: the hang this guards against would stop the test run itself.
        done = subprocess.run(
            [sys.executable, "-m", "trace_doctor.cli", "analyze", "--no-html", "--config", str(config), str(run)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(trace_doctor.__file__).parent.parent)},
        )
        assert done.returncode == 2, done.stderr
        assert "configuration" in done.stderr and str(config) in done.stderr
