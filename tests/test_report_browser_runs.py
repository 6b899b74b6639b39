"""Every fixture run's HTML report in a real browser: it loads offline, draws every chart and fits a phone.

A file of its own (beside test_report_browser.py) so that `make test`'s two workers, which take a file
each at a time, share the browser tests: each case waits on Chromium compiling the report's plotly.js."""

from __future__ import annotations

import pytest
from conftest import CHROMIUM, FIXTURE_RUNS

if not CHROMIUM.exists():
    pytest.skip(
        "Chromium is not installed at /usr/bin/chromium (apt-get install chromium); browser tests skipped",
        allow_module_level=True,
    )

from test_report_browser import analysed, assert_fits_a_phone, assert_healthy_page, open_report  # noqa: E402

FIXTURES = (
    sorted(p.name for p in FIXTURE_RUNS.glob("*") if (p / "metrics.jsonl").exists()) if FIXTURE_RUNS.exists() else []
)


@pytest.mark.parametrize("scenario", FIXTURES or ["(fixtures not generated)"])
def test_fixture_reports_load_offline_and_draw_every_chart(browser, tmp_path, scenario):
    if not FIXTURES:
        pytest.skip("fixtures/runs has not been generated (make fixtures)")
    result = analysed(FIXTURE_RUNS / scenario)
    opened = open_report(browser, result, tmp_path / f"{scenario}.html")
    assert_healthy_page(opened, result)
    if not result.run.spans.is_empty():
        assert opened.page.locator("#chart-gantt .main-svg").count() > 0
    assert_fits_a_phone(opened.page)
