"""The HTML report in a real browser: it loads offline, draws every chart, navigates, and resists injection."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CHROMIUM, CORPUS, FIXTURE_RUNS

from trace_doctor.model import Analysis
from trace_doctor.report.html import write_html

if not CHROMIUM.exists():
    pytest.skip(
        "Chromium is not installed at /usr/bin/chromium (apt-get install chromium); browser tests skipped",
        allow_module_level=True,
    )

import polars as pl  # noqa: E402
from playwright.sync_api import Page  # noqa: E402
from test_report_html import XSS, build_analysis  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
CORPUS_RUNS = (
    "tinker-rl-lab/experiments/results/arithmetic_metrics.jsonl",
    "sushantmehta-tinker-cookbook/logs_v2p7",
    "bzz-tinker-cookbook/data/context_distillation/logs/exp1_off_policy",
)


class Opened:
    """A report loaded in a page, with every console error and network request it caused."""

    def __init__(self, page: Page, url: str):
        self.page, self.url = page, url
        self.errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))
        page.goto(url)
        page.wait_for_load_state("load")
        # Plotly draws synchronously in newPlot; give layout-triggered redraws a moment to settle.
        page.wait_for_timeout(300)


def open_report(browser, result: Analysis, path: Path) -> Opened:
    write_html(result, path)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    return Opened(page, path.resolve().as_uri())


def analysed(path: Path) -> Analysis:
    try:
        from trace_doctor.api import analyze, load_run
    except ImportError as exc:
        pytest.skip(f"the ingest layer is incomplete in this tree ({exc})")
    return analyze(load_run(path))


PHONE = {"width": 375, "height": 812}
OVERFLOWING = (
    "() => { const w = document.documentElement.clientWidth; return [...document.querySelectorAll('main *')]\n"
    "  .filter(e => !e.closest('svg') && e.getBoundingClientRect().right > w + 1)"
    ".map(e => e.tagName + '.' + e.className); }"
)


CHARTS_FIT = """() => [...document.querySelectorAll('.plot')].every(p => {
  const svg = p.querySelector('.main-svg');
  return !svg || svg.getBoundingClientRect().width <= p.getBoundingClientRect().width + 1;
})"""


def assert_fits_a_phone(page: Page) -> None:
    """At 375 px nothing widens the page: wide content wraps, reflows or scrolls in its own box."""
    page.set_viewport_size(PHONE)
    # Every chart redraws at its new width (plotly's and the page's resize handlers are debounced).
    page.wait_for_function(CHARTS_FIT, timeout=10_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.evaluate(OVERFLOWING) == []


def assert_healthy_page(opened: Opened, result: Analysis) -> None:
    page = opened.page
    assert opened.errors == []
    assert opened.requests == [opened.url], opened.requests
    plots = page.eval_on_selector_all(
        ".plot",
        "els => els.map(e => [e.id, !!e.querySelector('.main-svg'), e.querySelectorAll('path, rect, canvas').length])",
    )
    assert plots, "no chart on the page"
    for chart_id, drawn, marks in plots:
        assert drawn and marks > 0, f"{chart_id} did not render"
    assert page.locator("article.card").count() == len(result.findings)
    assert page.evaluate("window.__pwned") is None


@pytest.mark.parametrize("with_trace", [True, False], ids=["synthetic", "synthetic-metrics-only"])
def test_synthetic_reports_load_offline_and_draw_every_chart(browser, tmp_path, with_trace):
    name = "with-trace" if with_trace else "metrics-only"
    result = build_analysis(with_trace=with_trace)
    opened = open_report(browser, result, tmp_path / f"{name}.html")
    assert_healthy_page(opened, result)


@pytest.mark.parametrize("relative", CORPUS_RUNS)
def test_corpus_reports_read_well_without_a_trace(browser, tmp_path, relative):
    path = CORPUS / relative
    if not path.exists():
        pytest.skip("the real-run corpus ../shared/corpus is not present on this machine (CI has it)")
    result = analysed(path)
    opened = open_report(browser, result, tmp_path / "corpus.html")
    assert_healthy_page(opened, result)
    body = opened.page.inner_text("body")
    assert "No trace in this run." in body
    assert opened.page.locator("#chart-step-time .main-svg").count() > 0
    assert_fits_a_phone(opened.page)


def _gantt_range(page: Page) -> list[float]:
    return page.evaluate("document.getElementById('chart-gantt').layout.xaxis.range.slice()")


def test_show_on_timeline_moves_the_gantt(browser, tmp_path):
    result = build_analysis(steps=20)
    opened = open_report(browser, result, tmp_path / "timeline.html")
    page = opened.page
    # Start from another step so the click has somewhere to go.
    page.locator("button.step-button", has_text="step 0").click()
    before = _gantt_range(page)
    page.locator("#finding-0 button.show-on-timeline").click()
    after = _gantt_range(page)
    assert after != before
    gap_start_s, gap_end_s = (t / 1e6 for t in result.findings[0].time_ranges_us[0])
    origin_s = result.run.spans["start_us"].min() / 1e6
    assert after[0] <= gap_start_s - origin_s and after[1] >= gap_end_s - origin_s  # the shaded gap is in view


def test_show_on_timeline_moves_the_demo_gantt(browser, tmp_path):
    demo = FIXTURE_RUNS / "demo"
    if not demo.exists():
        pytest.skip("fixture run demo has not been generated (make fixtures)")
    result = analysed(demo)
    opened = open_report(browser, result, tmp_path / "demo.html")
    page = opened.page
    buttons = page.locator("button.show-on-timeline[data-chart='chart-gantt']")
    assert buttons.count() > 0
    page.locator("button.step-button").last.click()
    before = _gantt_range(page)
    buttons.first.click()
    assert _gantt_range(page) != before
    assert_reads_the_diagnosis(page, result)


def assert_reads_the_diagnosis(page: Page, result: Analysis) -> None:
    """Symptoms sit under a cause that explains them; the time account's segments fill the wall time,
    each cause in the colour of the chip on its finding's card."""
    from trace_doctor.triage.locate import finding_key

    order = page.eval_on_selector_all(
        "article.card", "els => els.map(e => [parseInt(e.dataset.finding), parseInt(e.dataset.depth)])"
    )
    assert sorted(i for i, _ in order) == list(range(len(result.findings)))
    key_of = {i: finding_key(f) for i, f in enumerate(result.findings)}
    for position, (index, depth) in enumerate(order):
        finding = result.findings[index]
        if not depth:
            continue
        above = [key_of[i] for i, d in reversed(order[:position]) if d < depth]
        assert above and above[0] in finding.explained_by, (finding.rule, above[:1], finding.explained_by)
    account = result.run_summary.account
    if not account or not account.causes:
        assert page.locator("#time-account").count() == 0
        return
    widths = page.eval_on_selector_all(
        "#time-account .account-bar:not(.fixed) .seg", "els => els.map(e => e.getBoundingClientRect().width)"
    )
    bar = page.locator("#time-account .account-bar:not(.fixed)").bounding_box()
    assert sum(widths) == pytest.approx(bar["width"], abs=2)
    chips = page.eval_on_selector_all(
        "#time-account td.part a.finding-swatch",
        "els => els.map(e => [e.getAttribute('href'), getComputedStyle(e).backgroundColor])",
    )
    assert len(chips) == len(account.causes)
    for href, colour in chips:
        card_chip = page.locator(f"{href} .card-head .finding-swatch")
        assert card_chip.evaluate("e => getComputedStyle(e).backgroundColor") == colour


def test_injection_strings_stay_text(browser, tmp_path):
    fixture = FIXTURE_RUNS / "xss"
    result = analysed(fixture) if fixture.exists() else build_analysis(hostile=XSS)
    opened = open_report(browser, result, tmp_path / "xss.html")
    page = opened.page
    # Hover every bar so plotly renders hover labels built from input too.
    if page.locator("#chart-gantt .main-svg").count():
        box = page.locator("#chart-gantt .plot-container").bounding_box()
        for fraction in (0.3, 0.5, 0.7):
            page.mouse.move(box["x"] + box["width"] * fraction, box["y"] + box["height"] * 0.4)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img[src='x']").count() == 0
    body = page.inner_text("body")
    assert XSS in body, "the injection string should be shown literally"
    assert opened.errors == []


def test_demo_screenshots_for_review(browser, tmp_path):
    sample = ROOT / "trace_doctor" / "sample_run"
    result = analysed(sample) if (sample / "metrics.jsonl").exists() else build_analysis()
    opened = open_report(browser, result, tmp_path / "demo.html")
    ARTIFACTS.mkdir(exist_ok=True)
    page = opened.page
    page.screenshot(path=str(ARTIFACTS / "report-demo-top.png"))
    page.screenshot(path=str(ARTIFACTS / "report-demo-full.png"), full_page=True)
    for section in ("findings", "timeline", "whole-run"):
        page.locator(f"#{section}").screenshot(path=str(ARTIFACTS / f"report-demo-{section}.png"))
    assert (ARTIFACTS / "report-demo-full.png").stat().st_size > 10_000
    assert_fits_a_phone(page)
    for section in ("findings", "timeline"):
        page.locator(f"#{section}").screenshot(path=str(ARTIFACTS / f"report-demo-phone-{section}.png"))


def test_log_scale_toggle_switches_the_step_time_axis(browser, tmp_path):
    from test_report_html import _with_outlier

    result = _with_outlier(build_analysis(steps=30), 20, 36_341.0)
    opened = open_report(browser, result, tmp_path / "outlier.html")
    page = opened.page
    axis_type = "document.getElementById('chart-step-time').layout.yaxis.type"
    assert page.evaluate(axis_type) == "log"
    page.locator(".view-toggle[data-chart='chart-step-time'] button", has_text="Linear").click()
    assert page.evaluate(axis_type) == "linear"
    assert (
        page.locator(".view-toggle[data-chart='chart-step-time'] button[aria-pressed='true']").inner_text() == "Linear"
    )
    page.locator(".view-toggle[data-chart='chart-phases'] button", has_text="Full range").click()
    top = page.evaluate("document.getElementById('chart-phases').layout.yaxis.range[1]")
    assert top > 36_000  # the clipped step is back in view
    assert opened.errors == []


@pytest.mark.parametrize("width", [1366, 1024])
def test_nothing_overflows_the_page_at_laptop_widths(browser, tmp_path, width):
    sample = ROOT / "trace_doctor" / "sample_run"
    result = analysed(sample) if (sample / "metrics.jsonl").exists() else build_analysis()
    result.run.meta.model_name = "Qwen/Qwen3-30B-A3B-Instruct-2507-and-a-very-long-fine-tune-suffix"
    write_html(result, tmp_path / "wide.html")
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto((tmp_path / "wide.html").resolve().as_uri())
    page.wait_for_load_state("load")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # Outside the plots, no element reaches past the viewport's right edge.
    overflowing = page.evaluate(
        "() => { const w = document.documentElement.clientWidth; return [...document.querySelectorAll('main *')]\n"
        "            .filter(e => !e.closest('svg') && e.getBoundingClientRect().right > w + 1)"
        ".map(e => e.tagName + '.' + e.className); }"
    )
    assert overflowing == []
    model = page.locator(".fact dd.name").first
    assert model.get_attribute("title") == result.run.meta.model_name
    assert model.evaluate("e => e.scrollWidth <= e.clientWidth")  # wrapped, not cut off


# ---- findings on the timeline ------------------------------------------------------------


LANES = """() => {
  const chart = document.getElementById('chart-gantt');
  const bars = chart.querySelectorAll('.barlayer .trace');
  return chart.data.map((t, k) => [t, k]).filter(([t]) => t.meta && t.meta.finding !== undefined).map(([t, k]) => ({
    finding: t.meta.finding, colour: t.marker.color, opacity: chart._fullData[k].opacity,
    drawn: getComputedStyle(bars[k].querySelector('path')).fill,
    drawnOpacity: getComputedStyle(bars[k]).opacity,
  }));
}"""
SHADING = """() => (document.getElementById('chart-gantt').layout.shapes || [])
  .filter(s => /^finding-/.test(s.name || '')).map(s => [s.name, s.opacity])"""


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def _selection(page: Page) -> tuple[list[str], list[str]]:
    cards = page.eval_on_selector_all("article.card.selected", "els => els.map(e => e.id)")
    pressed = page.eval_on_selector_all(
        "button.show-on-timeline[aria-pressed='true']", "els => els.map(e => e.dataset.finding)"
    )
    return cards, pressed


def _opacity_by_finding(page: Page) -> dict[int, float]:
    return {lane["finding"]: lane["opacity"] for lane in page.evaluate(LANES)}


def test_each_finding_has_its_own_colour_on_the_timeline_matching_its_card(browser, tmp_path):
    result = build_analysis(steps=20)
    page = open_report(browser, result, tmp_path / "lanes.html").page
    lanes = page.evaluate(LANES)
    colours = {lane["finding"]: lane["colour"] for lane in lanes}
    assert sorted(colours) == list(range(len(result.findings)))
    assert len(set(colours.values())) == len(colours), colours
    for lane in lanes:
        swatch = page.locator(f"#finding-{lane['finding']} .card-head .finding-swatch")
        assert swatch.evaluate("e => getComputedStyle(e).backgroundColor") == _rgb(lane["colour"])
        key = page.locator(f".lane-key .finding-swatch[data-finding='{lane['finding']}']")
        assert key.evaluate("e => getComputedStyle(e).backgroundColor") == _rgb(lane["colour"])
        # What plotly drew: the measured range in the colour itself, a named step hatched in it.
        assert lane["drawn"] == _rgb(lane["colour"]) or lane["drawn"].startswith("url(")
    solid = [lane for lane in lanes if not lane["drawn"].startswith("url(")]
    assert solid, "no finding drawn with its measured time range"


def test_show_on_timeline_marks_the_selected_finding_and_dims_the_others(browser, tmp_path):
    result = build_analysis(steps=20)
    page = open_report(browser, result, tmp_path / "select.html").page
    assert _selection(page) == ([], [])
    assert set(_opacity_by_finding(page).values()) == {1}
    resting = dict(page.evaluate(SHADING))

    page.locator("#finding-0 button.show-on-timeline").click()
    assert _selection(page) == (["finding-0"], ["0"])
    opacity = _opacity_by_finding(page)
    assert opacity[0] == 1 and all(v < 0.5 for f, v in opacity.items() if f != 0)
    assert all(v == 1 for _, v in page.evaluate(SHADING))  # finding 0 owns the only shaded range
    lane_0 = next(lane for lane in page.evaluate(LANES) if lane["finding"] == 0)
    assert float(lane_0["drawnOpacity"]) == 1.0
    dimmed = next(lane for lane in page.evaluate(LANES) if lane["finding"] == 1)
    assert float(dimmed["drawnOpacity"]) < 0.5  # the page shows it, not only the figure data

    page.locator("#finding-1 button.show-on-timeline").click()  # another one moves the selection
    assert _selection(page) == (["finding-1"], ["1"])
    opacity = _opacity_by_finding(page)
    assert opacity[1] == 1 and opacity[0] < 0.5
    assert all(v < resting[name] for name, v in page.evaluate(SHADING))

    page.locator("#finding-1 button.show-on-timeline").click()  # the same one again clears it
    assert _selection(page) == ([], [])
    assert set(_opacity_by_finding(page).values()) == {1}
    assert dict(page.evaluate(SHADING)) == resting

    # Keyboard: the buttons are real buttons (Tab reaches them; Enter and Space press them) and
    # Escape clears the selection.
    page.locator("#finding-2 button.show-on-timeline").focus()
    page.keyboard.press("Enter")
    assert _selection(page) == (["finding-2"], ["2"])
    page.keyboard.press("Escape")
    assert _selection(page) == ([], [])
    page.locator("#finding-0 button.show-on-timeline").focus()
    page.keyboard.press("Space")
    assert _selection(page) == (["finding-0"], ["0"])


TICKS = """() => {
  const chart = document.getElementById('chart-gantt');
  const svg = chart.querySelector('.main-svg').getBoundingClientRect();
  const plotLeft = svg.left + chart._fullLayout.margin.l;
  return [...chart.querySelectorAll('.ytick text')].map(t => {
    const box = t.getBoundingClientRect();
    const title = t.querySelector('title');
    return {text: [...t.querySelectorAll('tspan.line')].map(l => l.textContent).join('|') || t.textContent,
            left: box.left - svg.left, right: plotLeft - box.right, title: title ? title.textContent : null};
  });
}"""


def test_long_row_names_are_never_clipped_and_keep_their_full_text(browser, tmp_path):
    result = build_analysis(steps=8)
    long_track = "do_group_rollout_and_filter_constant_reward_groups_for_policy_0"
    long_thread = "ThreadPoolExecutor-0_0 worker with a long name"
    result.run.spans = result.run.spans.with_columns(
        pl.when(pl.col("track") == "sample_task_0").then(pl.lit(long_track)).otherwise(pl.col("track")).alias("track"),
        pl.when(pl.col("track") == "sample_task_1")
        .then(pl.lit(long_thread))
        .otherwise(pl.col("thread"))
        .alias("thread"),
    )
    page = open_report(browser, result, tmp_path / "labels.html").page
    for width, line_chars in ((1366, 22), (PHONE["width"], 12)):
        page.set_viewport_size({"width": width, "height": 900})
        # The label set for this width is swapped in after a debounced resize: wait for it.
        page.wait_for_function(
            "([want]) => { const c = document.getElementById('chart-gantt');"
            " return c.dataset.rows === want && c._fullLayout.margin.l === c.layout.meta[want].margin_l; }",
            arg=["wide" if width > 600 else "narrow"],
            timeout=10_000,
        )
        page.wait_for_function(CHARTS_FIT, timeout=10_000)
        ticks = page.evaluate(TICKS)
        assert len(ticks) == 3
        for tick in ticks:
            assert tick["left"] >= 0, tick  # inside the chart, not cut at its left edge
            assert tick["right"] >= -2, tick  # and ends at the plot area (glyph bounds may touch it)
            assert all(len(line) <= line_chars for line in tick["text"].split("|")), tick
        full = {tick["title"] for tick in ticks if tick["title"]}
        assert {f"MainThread · {long_track}", f"{long_thread} · sample_task_1"} <= full
        assert any(t["text"] == "MainThread|main" for t in ticks)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    # Hovering a shortened label shows its full name (the tooltip needs pointer events on the text).
    title_text = page.locator("#chart-gantt .ytick text", has=page.locator("title")).first
    assert title_text.evaluate("e => getComputedStyle(e).pointerEvents") != "none"


GANTT_VIEW = """() => {
  const chart = document.getElementById('chart-gantt');
  const [x0, x1] = chart.layout.xaxis.range;
  const rows = chart.layout.yaxis.tickvals;
  const drawn = new Set(); const names = new Set();
  for (const trace of chart.data) {
    if (trace.yaxis === 'y2' || !trace.base) continue;
    trace.base.forEach((start, i) => {
      if (start < x1 && start + trace.x[i] > x0) {
        drawn.add(trace.y[i]); names.add(trace.hovertext[i].split('</b>')[0].replace('<b>', ''));
      }
    });
  }
  return {rows: rows.length, filled: rows.filter(r => drawn.has(r)).length, names: [...names]};
}"""


@pytest.mark.parametrize("scenario", ["rl_healthy", "rl_stream_healthy"])
def test_an_rl_steps_gantt_draws_its_sampling_and_no_empty_task_rows(browser, tmp_path, scenario):
    opened = open_report(browser, analysed(FIXTURE_RUNS / scenario), tmp_path / f"{scenario}.html")
    opened.page.goto(opened.url)
    opened.page.wait_for_function("document.getElementById('chart-gantt')?.layout !== undefined")
    view = opened.page.evaluate(GANTT_VIEW)
    # The step's sampling (the loop's phase, each rollout's sample call) is in the window, not only its train step.
    assert {"sampling", "policy_sample", "sample"} & set(view["names"]), view["names"]
    assert "policy_sample" in view["names"]
    # Short-lived task tracks share rows across steps: at most one row of the view is empty.
    assert view["rows"] - view["filled"] <= 1, view
    opened.page.screenshot(path=str(tmp_path / f"{scenario}.png"), full_page=True)
