"""Redaction by value: every planted credential type goes, in every place a run keeps text; ids,
digests, names and numbers stay. End to end through the bundle and every `--redact` output."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import CORPUS, FIXTURE_RUNS
from hypothesis import given, settings
from hypothesis import strategies as st
from planted_secrets import CONTEXTS, NOT_SECRETS, SECRETS, SESSION_ID, TRAINING_RUN, leaks, write_secret_run

from trace_doctor.api import analyze, load_run
from trace_doctor.cli import main
from trace_doctor.fleet import analyze_sources
from trace_doctor.redact import REDACTED, redact_frame, redact_run, redact_split, redact_text, redact_value
from trace_doctor.redact.shapes import TRIGGER
from trace_doctor.redact.text import LINE_SPLIT_CHARS, _scan
from trace_doctor.report import formats
from trace_doctor.report.fleet import render_fleet
from trace_doctor.report.fleet_html import render_fleet_html
from trace_doctor.report.html import write_html
from trace_doctor.runs import split_runs
from trace_doctor.settings import Settings

# Credentials recognisable by their shape alone, with no word before them.
SHAPED = (
    "tinker",
    "openai",
    "openai_legacy",
    "anthropic",
    "huggingface",
    "slack",
    "github",
    "github_pat",
    "gitlab",
    "aws_key_id",
    "google",
    "stripe",
    "stripe_restricted",
    "npm",
    "jwt",
)


@pytest.mark.parametrize("label", sorted(CONTEXTS))
def test_each_credential_type_is_redacted_where_runs_write_it(label):
    clean = redact_text(CONTEXTS[label])
    assert leaks(clean, {label: SECRETS[label]}) == [], clean
    assert REDACTED in clean


@pytest.mark.parametrize("label", SHAPED)
@pytest.mark.parametrize("template", ["{}", "x {} y", '{{"name": "{}"}}', "run/{}.log", "a\\n{}", "\\u0022{}"])
def test_vendor_shapes_are_redacted_without_any_word_before_them(label, template):
    """Also right after a JSON escape (`\\n`, `\\u0022`): span arguments are stored as JSON text."""
    clean = redact_text(template.format(SECRETS[label]))
    assert leaks(clean, {label: SECRETS[label]}) == [], clean


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key: https://user:pw123@host/x", f"key: https://user:{REDACTED}@host/x"),
        ("token: password=abc123", f"token: password={REDACTED}"),
        (
            "wandb via https://u:p@proxy " + "0123456789abcdef" * 2 + "01234567",
            f"wandb via https://u:{REDACTED}@proxy {REDACTED}",
        ),
        (f"https://x-{SECRETS['github']}@github.com/o/r", f"https://{REDACTED}@github.com/o/r"),
        (f"sort key {SECRETS['google']}", f"sort key {REDACTED}"),
    ],
)
def test_a_credential_inside_a_value_that_is_not_named_one(text, expected):
    """A value the keyword rule keeps (or a URL user it keeps) is still scanned for what it holds."""
    assert redact_text(text) == expected


KEPT = [
    f"tinker.lib.public_interfaces.service_client:87 [INFO] ServiceClient initialized for session {SESSION_ID}",
    f"Saved checkpoint tinker://{TRAINING_RUN}/sampler_weights/000020",
    f"checkpoint sha256={NOT_SECRETS['checkpoint sha256']} step=20",
    f"cache key: {NOT_SECRETS['checkpoint sha256']}",
    f"tinker-cookbook commit {NOT_SECRETS['git commit']}",
    f"pip install git+https://github.com/thinking-machines-lab/tinker-cookbook@{NOT_SECRETS['git commit']}",
    '{"step": 17, "num_tokens": 12765, "tokens/sampled": 0, "optim/kl_sample_train_v1": 0.0012, "max_tokens": 1024}',
    '{"model_name": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer": "Qwen/Qwen3-8B", "renderer_name": "llama3"}',
    "key: optim/kl_sample_train_v1",
    "KeyError: 'step'",
    "No checkpoints found with key state_path in tmp/tinker-runs/bash_code",
    "For the key of D major, your kick drum should be tuned",
    "Passwords will expire every 30 days, new password policy applies",
    "password authentication failed for user bob",
    "PWD=/home/user/tinker-runs/exp1",
    "token usage: 20847 prompt tokens + 16384 max_tokens > 32768",
    "Authorization header missing; token expired at 2024-05-01T10:00:00",
    "ssh://git@github.com/org/repo.git",
    "api_key=None secret: null password: '' token: <redacted> api_key=$TINKER_API_KEY",
    "Task-12 awaiting sample_async; disk-cache hit; risk-adjusted",
    "use_auth=true num_keys=3 sort_key=prompt_length",
]


@pytest.mark.parametrize("line", KEPT)
def test_what_is_not_a_credential_is_kept(line):
    assert redact_text(line) == line


def test_nothing_in_the_real_corpus_is_redacted():
    """Precision on real runs: 15 MB of metrics, traces, logs, profiles and dumps hold no credential,
    so redaction must change none of it (a false positive there makes a bundle useless)."""
    if not CORPUS.exists():
        pytest.skip("the real-run corpus is not present")
    changed = []
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix != ".md"):
        data = path.read_bytes()
        if b"\x00" in data[:4096]:
            continue
        text = data.decode("utf-8", "replace")
        if redact_text(text) != text:
            changed.append(path.name)
    assert changed == []


def test_config_values_keys_and_numbers():
    config = {
        "api_key": "short",
        "max_tokens": 1024,
        "db_password": 123456,
        "sort_key": "prompt_length",
        "hf_token": SECRETS["huggingface"],
        "secret": {"a": "b", "n": [1, 2]},
        "notes": CONTEXTS["prose_password"],
        SECRETS["github"]: 1.0,
        "use_auth": True,
        "session_id": SESSION_ID,
    }
    clean = redact_value(config)
    assert clean["api_key"] == REDACTED and clean["db_password"] == REDACTED and clean["hf_token"] == REDACTED
    assert clean["max_tokens"] == 1024 and clean["sort_key"] == "prompt_length" and clean["use_auth"] is True
    assert clean["secret"] == {"a": REDACTED, "n": [REDACTED, REDACTED]}
    assert clean["session_id"] == SESSION_ID and REDACTED in clean
    assert leaks(json.dumps(clean)) == []


def test_metric_names_holding_a_key_are_renamed_and_none_is_lost():
    frame = pl.DataFrame(
        {
            "step": [0, 1],
            f"env/A={SECRETS['openai']}": [1.0, 2.0],
            f"env/A={SECRETS['anthropic']}": [3.0, 4.0],
            "note": [CONTEXTS["bearer"], "plain"],
        }
    )
    clean = redact_frame(frame)
    assert clean.columns == ["step", f"env/A={REDACTED}", f"env/A={REDACTED} #2", "note"]
    assert clean[f"env/A={REDACTED} #2"].to_list() == [3.0, 4.0]
    assert clean["note"].to_list() == [f"request headers: Authorization: Bearer {REDACTED}", "plain"]


def test_a_long_text_is_redacted_exactly_as_one_scan_would():
    """Past LINE_SPLIT_CHARS, polars picks the lines to scan: the result must be the same."""
    pool = [*CONTEXTS.values(), *KEPT, "plain text line " * 5]
    lines = [pool[(i * 7) % len(pool)] for i in range(2 * LINE_SPLIT_CHARS // 40)]
    text = "\n".join(lines)
    assert len(text) > LINE_SPLIT_CHARS
    assert redact_text(text) == _scan(text)
    assert leaks(redact_text(text)) == []


FRAGMENTS = [
    *("key token tokens KEY Token api_key apiKey dbPassword password passwd pwd secret secrets auth author".split()),
    *("authorization bearer Bearer cookie sig signature credential wandb W&B is was".split()),
    *("sk- sk-ant- sk_live_ rk_test_ tml- hf_ xoxb- xapp- ghp_ github_pat_ glpat- AKIA ASIA AIza npm_".split()),
    *("pypi- gsk_ xai- r8_ SG. eyJ https:// postgres:// ://".split()),
    *(': = := => @ " \' ` \\" \\n \\u0022 _ - . / ; , & ( ) [ ] { } < >'.split()),
    " ",
    "\t",
    "\n",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "a",
    "Z",
    "0",
    "PLANTEDabc123XYZ",
    "0123456789abcdef0123456789abcdef01234567",
    "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY",
]


# Whole credentials and the lines they come in, for the fragments to cut into and glue around.
ATOMS = [*SECRETS.values(), *CONTEXTS.values(), *KEPT]


def test_the_polars_trigger_matches_each_credential_alone():
    lines = [line for atom in ATOMS for line in atom.split("\n")]
    lines += [f"x{value}" for value in SECRETS.values()] + [f"\\n{value}" for value in SECRETS.values()]
    changed = [line for line in lines if _scan(line) != line]
    assert len(changed) > len(SECRETS)
    assert pl.Series(changed).str.contains(TRIGGER).all()


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.sampled_from(ATOMS)), max_size=10), st.sampled_from("\n "))
def test_the_polars_trigger_matches_every_line_the_scanner_would_change(parts, glue):
    """TRIGGER lets tables and long texts skip most strings: it must never skip one with a credential."""
    text = glue.join(parts)
    for line in text.split("\n"):
        if _scan(line) != line:
            assert pl.Series([line]).str.contains(TRIGGER).item(), line


# ---- tables left on disk: redacted as they are read, never read whole to be redacted --------------


def _stored_spans(folder: Path) -> pl.DataFrame:
    """Spans with a planted key in a track and in an argument, and clean neighbours."""
    rows = 3 * [("sample", f"Task-{SECRETS['openai']}", '{"note": "clean"}')]
    rows += [("train_step", "main", f'{{"token": "{SECRETS["huggingface"]}"}}'), ("optim_step", "main", "{}")]
    spans = pl.DataFrame(
        {
            "name": [r[0] for r in rows],
            "track": [r[1] for r in rows],
            "args": [r[2] for r in rows],
            "start_us": [float(i) for i in range(len(rows))],
        }
    )
    spans.write_parquet(folder / "part-00000.parquet")
    return spans


def test_a_stored_table_is_redacted_as_it_is_read_and_a_deferred_one_is_never_produced(tmp_path):
    from trace_doctor.ingest.storage.stored_table import DeferredPart, StoredTable
    from trace_doctor.model import RunTables

    spans = _stored_spans(tmp_path)
    produced = []

    def produce() -> StoredTable:
        produced.append(True)
        frame = pl.DataFrame({"name": [f"key {SECRETS['tinker']}"], "step": [0]})
        return StoredTable([frame], 1, dict(frame.schema))

    run = RunTables()
    run.spans = StoredTable([tmp_path / "part-00000.parquet"], spans.height, dict(spans.schema))
    run.step_spans = StoredTable([DeferredPart(produce, 1)], 1, {"name": pl.String, "step": pl.Int64})
    clean = redact_run(run)
    # Nothing read yet: the tables are still on disk (the step spans' file not even parsed).
    assert not isinstance(clean._raw("spans"), pl.DataFrame) and produced == []
    assert clean.height("spans") == spans.height
    scanned = clean.scan("spans").filter(pl.col("name") != "optim_step").collect()
    assert scanned.height == 4 and leaks(scanned.write_csv()) == []
    # The rows are those the whole table redacted in memory would have, in the same order.
    assert clean.scan("spans").collect().equals(redact_frame(spans))
    assert clean.scan("spans").collect().get_column("track").to_list()[-1] == "main"
    assert produced == []
    step_spans = clean.step_spans
    assert produced == [True] and leaks(step_spans.write_csv()) == [] and step_spans.height == 1


# ---- end to end: the planted run through the bundle and every --redact output -------------------


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return write_secret_run(tmp_path_factory.mktemp("planted") / "run")


@pytest.fixture(scope="module")
def redacted(planted):
    return analyze(redact_run(load_run(planted)))


def test_the_planted_secrets_do_reach_the_outputs_unredacted(planted):
    """The corpus is effective: without redaction, the JSON document carries planted secrets."""
    document = formats.render(analyze(load_run(planted)), "json")
    assert len(leaks(document)) >= 5


def test_error_grouping_sees_the_slack_token_already_redacted(planted, redacted):
    """Grouping blanks digits (`xoxb-…-…-<tail>`): after that no shape is left to find."""
    raw = json.loads(formats.render(analyze(load_run(planted)), "json"))
    clean = json.loads(formats.render(redacted, "json"))
    signatures = [e["signature"] for f in raw["findings"] for e in f["evidence"].get("errors", [])]
    assert any("xoxb-…-…-" in s for s in signatures)
    signatures = [e["signature"] for f in clean["findings"] for e in f["evidence"].get("errors", [])]
    assert any("notify failed … times with [REDACTED]" in s for s in signatures)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit", "sarif"])
def test_every_format_is_clean(redacted, fmt):
    assert leaks(formats.render(redacted, fmt)) == []


def test_html_report_is_clean(redacted, tmp_path):
    write_html(redacted, tmp_path / "report.html")
    html = (tmp_path / "report.html").read_bytes()
    assert leaks(html) == [] and NOT_SECRETS["model name"].encode() in html


def test_redaction_keeps_ids_digests_names_and_counts(planted, redacted):
    raw = load_run(planted)
    clean = redacted.run
    assert clean.meta.model_name == NOT_SECRETS["model name"]
    assert clean.meta.config["git_commit"] == NOT_SECRETS["git commit"]
    assert clean.meta.config["session_id"] == SESSION_ID and clean.meta.config["max_tokens"] == 1024
    messages = "\n".join(clean.log_events["message"].to_list())
    for value in (SESSION_ID, TRAINING_RUN, NOT_SECRETS["checkpoint sha256"], NOT_SECRETS["git commit"]):
        assert value in messages
    assert clean.steps.height == raw.steps.height and clean.spans.height == raw.spans.height
    assert clean.steps["optim/kl_sample_train_v1"].to_list() == raw.steps["optim/kl_sample_train_v1"].to_list()
    assert clean.log_events.height == raw.log_events.height and len(clean.warnings) == len(raw.warnings)
    for name, frame in clean.tables().items():
        text = frame.select(pl.col(pl.String)).write_csv() + ",".join(frame.columns)
        assert leaks(text) == [], name


def test_bundle_of_the_planted_run(planted, tmp_path):
    out = CliRunner().invoke(main, ["bundle", str(planted), "-o", str(tmp_path / "b.zip")], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    with zipfile.ZipFile(tmp_path / "b.zip") as archive:
        contents = {name: archive.read(name) for name in archive.namelist()}
    assert {"SUMMARY.md", "findings.json", "config.json", "report.html", "trace/worst_steps.json"} <= set(contents)
    for name, data in contents.items():
        assert leaks(data) == [], name
    summary = contents["SUMMARY.md"].decode()
    assert SESSION_ID in summary and TRAINING_RUN.split(":")[0] in summary
    config = json.loads(contents["config.json"])
    assert config["model_name"] == NOT_SECRETS["model name"] and config["git_commit"] == NOT_SECRETS["git commit"]
    assert config["wandb"] == {"api_key": REDACTED, "project": "planted"}


def test_analyze_redact_on_the_command_line(planted, tmp_path):
    out = CliRunner().invoke(
        main,
        [
            *("analyze", str(planted), "--redact", "--format", "json"),
            *("--output", str(tmp_path / "out.json"), "--html", str(tmp_path / "r.html")),
        ],
        catch_exceptions=False,
    )
    assert out.exit_code == 0, out.output
    for name in ("out.json", "r.html"):
        assert leaks((tmp_path / name).read_bytes()) == [], name
    assert json.loads((tmp_path / "out.json").read_text())["run"]["model_name"] == NOT_SECRETS["model name"]


@pytest.fixture(scope="module")
def fleet_folder(planted, tmp_path_factory):
    """Two runs, one of them in a folder whose name is a key (labels, ids and paths are input too)."""
    top = tmp_path_factory.mktemp("fleet")
    shutil.copytree(planted, top / f"sweep-{SECRETS['github']}")
    shutil.copytree(FIXTURE_RUNS / "sl_steady_slow", top / "steady")
    return top


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit", "sarif"])
def test_fleet_outputs_are_clean(fleet_folder, fmt, tmp_path):
    split = redact_split(split_runs([fleet_folder]))
    fleet = analyze_sources(split.runs, Settings(), jobs=1, fmt=fmt, html_dir=str(tmp_path), redact=True)
    assert len(fleet.analysed) == 2
    assert leaks(render_fleet(fleet, fmt)) == []
    if fmt == "json":
        assert leaks(render_fleet_html(fleet, tmp_path)) == []
        assert all(leaks(path.read_bytes()) == [] for path in tmp_path.glob("*.html"))
        assert all(leaks(path.name) == [] for path in tmp_path.iterdir())


def test_fleet_redact_on_the_command_line(fleet_folder, tmp_path):
    out = CliRunner().invoke(
        main,
        [
            *("analyze", str(fleet_folder), "--redact", "--jobs", "1", "--format", "markdown"),
            *("--output", str(tmp_path / "fleet.md"), "--html", str(tmp_path / "fleet.html")),
        ],
        catch_exceptions=False,
    )
    assert out.exit_code == 0, out.output
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) == 5  # fleet.md, fleet.html, one report per run, the plotly.min.js they share
    for path in written:
        assert leaks(path.read_bytes()) == [] and leaks(str(path)) == [], path


def test_export_and_ingest_redact_what_they_write(planted, tmp_path):
    """The trace exports and the Parquet dataset are outputs too: --redact leaves no planted secret in them."""
    runner = CliRunner()
    chrome, perfetto, dataset = tmp_path / "t.json", tmp_path / "t.pftrace", tmp_path / "ds"
    out = runner.invoke(
        main,
        ["export", str(planted), "--redact", "--chrome-json", str(chrome), "--perfetto", str(perfetto)],
        catch_exceptions=False,
    )
    assert out.exit_code == 0, out.output
    out = runner.invoke(main, ["ingest", str(planted), "--redact", "--jobs", "1", "--out", str(dataset)])
    assert out.exit_code == 0, out.output
    files = [chrome, perfetto, *(p for p in dataset.rglob("*") if p.is_file())]
    assert len(files) > 3
    for path in files:
        data = path.read_bytes()
        if path.suffix == ".parquet":
            data = pl.read_parquet(path).write_ndjson().encode()  # compressed pages hide the bytes
        assert leaks(data) == [] and leaks(str(path)) == [], path
    # With --no-redact the same export carries them (the test can fail).
    runner.invoke(main, ["export", str(planted), "--no-redact", "--chrome-json", str(tmp_path / "raw.json")])
    assert leaks((tmp_path / "raw.json").read_bytes())


def test_bundle_with_secrets_in_new_places(tmp_path):
    # The folder's name, config keys, a key split from its name by a CRLF, a UTF-16 log (PowerShell's
    # redirect, read since it has a byte-order mark), span and thread names, metric keys.
    run = write_secret_run(tmp_path / f"run-{SECRETS['huggingface']}")
    config = json.loads((run / "config.json").read_text())
    config[SECRETS["openai"]] = 1
    config["extra"] = {f"GITHUB_TOKEN={SECRETS['github_pat']}": "x", "alias": CONTEXTS["jwt"]}
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (run / "crlf.log").write_bytes(
        (
            f"root:1 [WARNING] env: TINKER_API_KEY=\r\n{SECRETS['tinker']}\r\n"
            f"root:3 [ERROR] auth failed Authorization: Bearer {SECRETS['bearer']}\r\n"
        ).encode()
    )
    utf16 = (
        f"root:1 [INFO] start\r\nroot:2 [ERROR] {CONTEXTS['openai']}\r\nroot:3 [WARNING] {CONTEXTS['aws_secret']}\r\n"
    )
    (run / "worker.log").write_bytes(utf16.encode("utf-16"))
    with (run / "trace_events.jsonl").open("a", encoding="utf-8") as trace:
        for ph, ts in (("B", 2_000_000.0), ("E", 2_100_000.0)):
            args = {"thread": f"T-{SECRETS['stripe']}", "track": "main"}
            event = {"name": f"call {CONTEXTS['aws_key_id']}", "ph": ph, "pid": 0, "tid": 7, "ts": ts, "args": args}
            trace.write(json.dumps(event) + "\n")
    out = CliRunner().invoke(main, ["bundle", str(run), "-o", str(tmp_path / "b.zip")], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert leaks(out.output) == []
    with zipfile.ZipFile(tmp_path / "b.zip") as archive:
        contents = {name: archive.read(name) for name in archive.namelist()}
    for name, data in contents.items():
        assert leaks(name) == [] and leaks(data) == [], name
    document = json.loads(contents["findings.json"])
    logs = {Path(i["path"]).name: i["records"] for i in document["run"]["inputs"] if i["kind"] == "log"}
    assert logs["worker.log"] == 3 and logs["crlf.log"] == 3  # the UTF-16 log is read, not passed over
    errors = json.dumps([f for f in document["findings"] if f["rule"] == "decoded-error"])
    assert "OpenAI client created with key" in errors  # its error line reached the decoder, redacted


# ---- redaction is the default; --no-redact opts out and every output says so ----------------------


def _analyze_cli(planted, tmp_path, *flags):
    outputs = {}
    for fmt in ("text", "json", "markdown", "junit", "sarif", "summary"):
        out = tmp_path / f"out.{fmt}"
        args = ["analyze", str(planted), *flags, "--format", fmt, "--output", str(out), "--no-html"]
        if fmt == "json":
            args = [*args[:-1], "--html", str(tmp_path / "report.html")]
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        outputs[fmt] = out.read_text()
    outputs["html"] = (tmp_path / "report.html").read_text()
    return outputs


def test_every_output_is_redacted_without_being_asked(planted, tmp_path):
    for name, text in _analyze_cli(planted, tmp_path).items():
        assert leaks(text) == [], name
        assert "Not redacted" not in text, name
    document = json.loads((tmp_path / "out.json").read_text())
    assert "redacted" not in document["tool"]  # a redacted document is what it always was


def test_no_redact_keeps_the_credentials_and_says_so_in_each_header(planted, tmp_path):
    outputs = _analyze_cli(planted, tmp_path, "--no-redact")
    assert len(leaks(outputs["json"])) >= 5 and len(leaks(outputs["html"])) >= 20
    for name in ("text", "markdown", "html", "summary"):
        assert "Not redacted (--no-redact)" in outputs[name][:20_000], name
    assert json.loads(outputs["json"])["tool"]["redacted"] is False
    assert json.loads(outputs["sarif"])["runs"][0]["properties"]["redacted"] is False
    assert '<property name="redacted" value="false"' in outputs["junit"]


def test_redact_is_still_accepted(planted, tmp_path):
    out = CliRunner().invoke(main, ["analyze", str(planted), "--redact", "--no-html", "--format", "json"])
    assert out.exit_code == 0 and leaks(out.output) == []


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"commit {NOT_SECRETS['git commit']} of tinker-cookbook (wandb logging added later in the file)", True),
        (f"step {NOT_SECRETS['checkpoint sha256'][:40]}", True),
        ("u0000/Users/me/Projects/pyinstrument/env/bin/pyinstrument0000", True),
        (f"aws region us-east-1 bucket {NOT_SECRETS['git commit']}", True),
        ("Basic authentication is not configured for this endpoint", True),
    ],
)
def test_wrapped_shapes_keep_what_is_no_secret(text, kept):
    assert (redact_text(text) == text) is kept
