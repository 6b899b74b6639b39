"""The fleet overview (trace_doctor/report/fleet_html.py): table, chart, findings matrix, config differences.

A sweep folder of fixture runs is analysed run by run (as `trace-doctor analyze SWEEP` does), with two
learning rates, a run folder whose name is an HTML injection and config values that are injections,
and the overview is read back: structure, links, escaping, determinism; then once in a real browser.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import CHROMIUM, CHROMIUM_ARGS

from trace_doctor.fleet import Fleet, RunReport, _shared_plotly, analyze_sources
from trace_doctor.report import figures
from trace_doctor.report.fleet_html import render_fleet_html, write_fleet_html
from trace_doctor.report.html import SHARED_PLOTLY
from trace_doctor.runs import split_runs
from trace_doctor.settings import Settings

FIXTURE_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
# A run folder's name is its label: no "/" in it, so an element rather than a script block.
HOSTILE_NAME = "<img src=x onerror=window.__pwned=1>"
HOSTILE_SCRIPT = "<script>window.__pwned=3</script>"
HOSTILE_MARKDOWN = "![x](https://evil.example/p.png)"
# The fixture runs copied into the sweep, the folder each gets, and what its config.json is changed to.
# `group_size` is a sweep key no SL rule or trainer detection reads (RL keys would make an SL run "rl").
SWEEP = {
    "sl_healthy_pipelined": ("sl_healthy_pipelined", {"group_size": HOSTILE_MARKDOWN}),
    "sl_slow_get_batch": ("sl_slow_get_batch", {"learning_rate": 0.001}),
    "rl_kl_step0": ("rl_kl_step0", {}),
    "xss": (HOSTILE_NAME, {"learning_rate": 5e-05, "group_size": HOSTILE_SCRIPT}),
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    missing = [name for name in SWEEP if not (FIXTURE_RUNS / name / "metrics.jsonl").exists()]
    if missing:
        pytest.skip(f"fixture runs {missing} have not been generated (make fixtures)")
    root = tmp_path_factory.mktemp("fleet") / "sweep"
    for name, (folder, changes) in SWEEP.items():
        target = root / folder
        shutil.copytree(FIXTURE_RUNS / name, target)
        config = json.loads((target / "config.json").read_text())
        config.update(changes)
        (target / "config.json").write_text(json.dumps(config, indent=2))
    return root


@pytest.fixture(scope="module")
def fleet(sweep) -> Fleet:
    html_dir = sweep.parent / "out" / "overview-runs"
    return analyze_sources(split_runs([sweep]).runs, Settings(), jobs=1, html_dir=str(html_dir))


@pytest.fixture(scope="module")
def overview(fleet, sweep) -> Path:
    path = sweep.parent / "out" / "overview.html"
    write_fleet_html(fleet, path)
    return path


@pytest.fixture(scope="module")
def page_text(overview) -> str:
    return overview.read_text(encoding="utf-8")


class Tables(HTMLParser):
    """Every <table> of a page by its class: rows of (cell text, cell attributes, links in the cell)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[dict]]] = {}
        self._table: list[list[dict]] | None = None
        self._cell: dict | None = None
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "table":
            self._table = self.tables.setdefault(attributes.get("class") or "", [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = {"text": "", "attrs": attributes, "links": [], "classes": []}
            self._table[-1].append(self._cell)
        elif self._cell is not None:
            if tag == "a" and "href" in attributes:
                self._cell["links"].append(attributes["href"])
            self._cell["classes"].extend((attributes.get("class") or "").split())

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag == "table":
            self._table = None
        elif tag in ("td", "th"):
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None and not self._skip:
            self._cell["text"] += data


def tables(text: str) -> dict[str, list[list[dict]]]:
    parser = Tables()
    parser.feed(text)
    return parser.tables


def body_rows(table: list[list[dict]]) -> list[list[dict]]:
    """The rows under the header row."""
    return table[1:]


# ---- structure -------------------------------------------------------------------------


def test_fleet_table_lists_every_run_in_the_fleets_order_with_its_facts(fleet, page_text):
    rows = body_rows(tables(page_text)["fleet-table"])
    assert [row[0]["text"].strip() for row in rows] == [str(i + 1) for i in range(len(fleet.reports))]
    shown = [row[1]["text"].strip() for row in rows]
    assert shown == [r.source.label for r in fleet.reports]
    labels = re.findall(r'<tr class="run-row[^"]*" data-run="([^"]*)"', page_text)
    assert [html.unescape(label) for label in labels] == [r.source.label for r in fleet.reports]
    by_label = {r.source.label: r for r in fleet.reports}
    for row in rows:
        report = by_label[row[1]["text"].strip()]
        assert row[2]["text"] == (report.row["trainer"] or "–")
        assert row[4]["text"] == str(report.row["steps"])
        assert row[6]["text"].strip() == report.status
        if report.main_finding:
            assert report.main_finding["code"] in row[7]["text"]
            assert report.main_finding["title"] in row[7]["text"]
        assert ("tripped" in row[9]["text"]) == report.gate_tripped
    trainers = {r.source.label: r.row["trainer"] for r in fleet.reports}
    assert trainers == {
        "sl_healthy_pipelined": "sl",
        "sl_slow_get_batch": "sl",
        "rl_kl_step0": "rl",
        HOSTILE_NAME: "sl",
    }
    # The worst run (the xss fixture's decoded error) comes first, the clear one last.
    assert fleet.reports[0].status == "error" and fleet.reports[-1].status == "clear"


def test_run_links_are_relative_and_resolve_to_each_runs_own_report(fleet, overview, page_text):
    rows = body_rows(tables(page_text)["fleet-table"])
    for row, report in zip(rows, fleet.reports, strict=True):
        (href,) = row[1]["links"]
        assert not href.startswith(("/", "file:")), href
        target = (overview.parent / unquote(href)).resolve()
        assert target == Path(report.html_path).resolve()
        assert target.is_file() and "Run report" in target.read_text(encoding="utf-8")


def test_header_counts_runs_gate_and_version(fleet, page_text):
    from trace_doctor import __version__

    assert f"trace-doctor {__version__}" in page_text
    facts = re.findall(r'<div class="fact[^"]*"><dt>([^<]+)</dt><dd[^>]*>(.*?)</dd>', page_text)
    values = {name: re.sub(r"<[^>]+>", "", value).strip() for name, value in facts}
    assert values["Runs"] == str(len(fleet.reports))
    assert values["Trip the gate"] == str(sum(r.gate_tripped for r in fleet.reports))
    assert "1 error" in values["Verdicts"] and "1 clear" in values["Verdicts"]


def test_step_time_chart_has_one_line_per_run_named_as_in_the_table(fleet, page_text):
    (block,) = re.findall(
        r'<script type="application/json" class="figure-data" data-target="chart-fleet-step-time">(.*?)</script>',
        page_text,
        re.S,
    )
    figure = json.loads(block)
    names = [trace["name"] for trace in figure["data"]]
    assert names == [
        figures.plot_text(f"#{i + 1} {r.source.label}") for i, r in enumerate(fleet.reports) if r.step_series
    ]
    for trace, report in zip(figure["data"], [r for r in fleet.reports if r.step_series], strict=True):
        assert trace["x"] == [s for s, _ in report.step_series]
        assert trace["y"] == [t for _, t in report.step_series]
    # The fixture runs' step times lie within 100x of each other: a linear axis.
    assert figure["layout"]["yaxis"]["type"] == "linear"


def test_findings_matrix_has_a_row_per_fired_rule_and_a_cell_per_run(fleet, page_text):
    matrix = tables(page_text)["matrix"]
    header, rows = matrix[0], matrix[1:]
    assert len(header) == 1 + len(fleet.reports)
    fired = {f["rule"] for r in fleet.reports for f in (r.document or {}).get("findings", [])}
    by_rule = {row[0]["text"].split()[-1]: row for row in rows}
    assert set(by_rule) == fired
    for column, report in enumerate(fleet.reports, start=1):
        findings = (report.document or {}).get("findings", [])
        for rule, row in by_rule.items():
            own = [f for f in findings if f["rule"] == rule]
            cell = row[column]
            if own:
                worst = min((f["severity"] for f in own), key=["error", "warning", "info"].index)
                assert cell["text"] == f"{worst[0].upper()} ×{len(own)}"
                assert f"sev-{worst}" in cell["classes"]
                assert all(f["title"] in cell["attrs"]["title"] for f in own)
                (link,) = cell["links"]
                assert link.endswith(f"#finding-{findings.index(own[0])}")
            else:
                assert cell["text"] in ("✓", "–", "!"), cell
    get_batch = by_rule["get-batch-bottleneck"]
    slow = next(i for i, r in enumerate(fleet.reports, start=1) if r.source.label == "sl_slow_get_batch")
    assert get_batch[slow]["text"] == "W ×1"
    decoded = by_rule["decoded-error"]
    hostile = next(i for i, r in enumerate(fleet.reports, start=1) if r.source.label == HOSTILE_NAME)
    assert decoded[hostile]["text"] == "E ×1"
    # Rows: the worst severity first.
    assert rows[0][0]["text"].split()[-1] == "decoded-error"


def test_config_differences_show_learning_rate_per_run_and_the_shared_keys_once(fleet, page_text):
    config = tables(page_text)["config"]
    header = [cell["text"] for cell in config[0]]
    assert header[:4] == ["#", "run", "verdict", "steady step"]
    assert "learning_rate" in header and "model_name" not in header
    column = header.index("learning_rate")
    expected = {
        "sl_healthy_pipelined": "0.0002",
        "sl_slow_get_batch": "0.001",
        "rl_kl_step0": "4e-05",
        HOSTILE_NAME: "5e-05",
    }
    for row, report in zip(config[1:], fleet.reports, strict=True):
        assert row[1]["text"] == report.source.label
        assert row[2]["text"] == report.status
        assert row[column]["text"] == expected[report.source.label]
    same = re.search(r'<div class="same">(.*?)</div>\s*</section>', page_text, re.S).group(1)
    assert "model_name" in same and "Qwen/Qwen3-8B" in same and "learning_rate" not in same


# ---- escaping, failures, determinism ----------------------------------------------------


def test_input_text_is_escaped_everywhere(page_text):
    for hostile in (HOSTILE_NAME, HOSTILE_SCRIPT, "onerror=window.__pwned=1>", "window.__pwned=3</script>"):
        assert hostile not in page_text
    assert "&lt;img src=x onerror=window.__pwned=1&gt;" in page_text  # the label, as text
    config_values = {cell["text"] for row in tables(page_text)["config"] for cell in row}
    assert HOSTILE_SCRIPT in config_values  # the config value, as text
    assert HOSTILE_MARKDOWN in config_values  # shown literally: HTML is not Markdown
    assert not re.search(r"<img[^>]+evil\.example", page_text)
    # In the embedded JSON, `<` `>` `&` are \u escapes, so no string can end a script block early.
    for block in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', page_text, re.S):
        assert "<" not in block and ">" not in block
        json.loads(block)


def test_a_run_that_could_not_be_analysed_shows_its_error(fleet, tmp_path):
    failed = RunReport(
        source=replace(fleet.reports[0].source, run_id="broken", label="broken-run", path="/nowhere/broken-run"),
        status="failed",
        error="no readable input: <b>metrics.jsonl</b> is empty",
        headline="not analysed: no readable input",
    )
    text = render_fleet_html(Fleet([*fleet.reports, failed]), base_dir=tmp_path)
    rows = body_rows(tables(text)["fleet-table"])
    assert rows[-1][1]["text"].strip() == "broken-run" and rows[-1][1]["links"] == []
    assert rows[-1][6]["text"].strip() == "failed"
    assert rows[-1][7]["text"] == "no readable input: <b>metrics.jsonl</b> is empty"
    assert "&lt;b&gt;metrics.jsonl&lt;/b&gt;" in text
    matrix = tables(text)["matrix"]
    assert all(row[-1]["text"] == "×" for row in matrix[1:])
    config = tables(text)["config"]
    assert config[-1][-1]["text"] == "no configuration recorded"


def test_output_is_deterministic(fleet, overview, page_text):
    again = render_fleet_html(fleet, base_dir=overview.parent)
    assert again == page_text
    from trace_doctor.report.html import _plotly_js

    assert not re.search(r"20\d\d-\d\d-\d\dT\d\d:\d\d", page_text.replace(_plotly_js(), ""))


def test_the_common_folder_of_the_runs_is_named_once(tmp_path):
    from trace_doctor.report.fleet_html import _display_labels

    assert _display_labels(["a/logs/x", "a/logs/y"]) == ["x", "y"]
    assert _display_labels(["a/x", "b/x"]) == ["a/x", "b/x"]
    assert _display_labels(["logs", "logs/inner"]) == ["logs", "logs/inner"]


# ---- in a browser -----------------------------------------------------------------------


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is not installed at /usr/bin/chromium")
def test_overview_in_a_browser_draws_the_chart_and_links_to_a_run(fleet, overview):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 900})
            errors: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            url = overview.resolve().as_uri()
            page.goto(url)
            page.wait_for_load_state("load")
            assert errors == []
            assert requests == [url]
            assert page.locator("#chart-fleet-step-time svg.main-svg").count() > 0
            assert page.locator("#chart-fleet-step-time .scatterlayer .trace").count() == sum(
                1 for r in fleet.reports if r.step_series
            )
            assert page.evaluate("window.__pwned") is None
            # Nothing overflows the page sideways: wide tables scroll inside their panels.
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            # The link leads to the first run's own report (whose rendering test_report_browser.py covers).
            with page.expect_navigation(wait_until="commit"):
                page.locator("table.fleet-table a.run-link").first.click()
            assert unquote(page.url) == unquote(Path(fleet.reports[0].html_path).resolve().as_uri())
        finally:
            browser.close()


# ---- the per-run pages share one plotly.js ------------------------------------------------

PLOTLY_HEAD = 400  # characters of plotly.js that identify it inlined in a page


def _per_run_pages(fleet: Fleet) -> list[Path]:
    pages = [Path(r.html_path) for r in fleet.reports if r.html_path]
    assert len(pages) == len(SWEEP)
    return pages


def test_per_run_pages_load_one_shared_plotly_written_beside_them(fleet):
    from trace_doctor.report.html import plotly_source as get_plotlyjs

    pages = _per_run_pages(fleet)
    folder = pages[0].parent
    assert {p.parent for p in pages} == {folder}
    shared = folder / SHARED_PLOTLY
    assert shared.read_text(encoding="utf-8") == get_plotlyjs()
    # Written once, atomically: nothing else in the folder but the pages and the one copy.
    assert sorted(p.name for p in folder.iterdir()) == sorted([*(p.name for p in pages), SHARED_PLOTLY])
    # Readable as the pages are (a private temporary file moved into place would not be).
    assert shared.stat().st_mode & 0o777 == pages[0].stat().st_mode & 0o777
    head = get_plotlyjs()[:PLOTLY_HEAD]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert head not in text
        assert re.findall(r"<script[^>]*\bsrc=\"([^\"]*)\"", text) == [SHARED_PLOTLY]
        (policy,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]*)"', text)
        assert "script-src 'self' file: 'unsafe-inline' 'unsafe-eval';" in policy
        assert "default-src 'none'" in policy
        # A page is its own data now: the fixture runs' pages are a few hundred KB, not 4.6 MB + that.
        assert page.stat().st_size < 2_000_000
        # A page mailed alone says what is missing instead of showing empty boxes.
        notice = re.search(r'<p class="plotly-missing" id="plotly-missing" role="alert" hidden>(.*?)</p>', text, re.S)
        assert notice and "plotly.min.js</code> beside this page" in notice.group(1)
        assert "trace-doctor analyze &lt;run&gt;</code> writes a self-contained report" in notice.group(1)


def test_no_shared_plotly_where_none_can_be_written_so_pages_inline_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert _shared_plotly(str(blocker / "overview-runs")) is None
    assert _shared_plotly(None) is None


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium is not installed at /usr/bin/chromium")
def test_per_run_page_draws_from_its_folder_and_says_so_when_copied_out_alone(fleet, tmp_path):
    from playwright.sync_api import sync_playwright

    page_path = next(Path(r.html_path) for r in fleet.reports if r.html_path and r.step_series)
    alone = tmp_path / "mailed" / page_path.name
    alone.parent.mkdir()
    shutil.copy(page_path, alone)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_path.resolve().as_uri())
            page.wait_for_load_state("load")
            assert errors == []  # the CSP let the shared file load from disk
            plots = page.locator(".plot").count()
            assert plots > 0 and page.locator(".plot svg.main-svg").count() >= plots
            assert page.locator("#plotly-missing").is_hidden()

            errors.clear()
            page.goto(alone.resolve().as_uri())
            page.wait_for_load_state("load")
            assert all("ERR_FILE_NOT_FOUND" in e for e in errors)  # the missing file, and no script error
            assert page.locator("#plotly-missing").is_visible()
            assert "plotly.min.js beside this page" in page.locator("#plotly-missing").inner_text()
            assert page.locator(".plot.not-drawn").count() == plots
            assert page.locator(".plot svg").count() == 0
            # The findings still read.
            assert page.locator("article.card").count() > 0 and page.locator("article.card").first.is_visible()
        finally:
            browser.close()
