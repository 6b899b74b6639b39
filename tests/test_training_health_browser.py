"""The Training health view in a real browser: every panel draws, a card's button highlights its
marks and dims the others', and at phone width (375 px) nothing overflows."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(
        "Chromium is not installed at /usr/bin/chromium (apt-get install chromium); browser tests skipped",
        allow_module_level=True,
    )

from conftest import CHROMIUM_ARGS  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402
from test_report_browser import Opened, assert_fits_a_phone, assert_healthy_page  # noqa: E402

from trace_doctor.api import analyze, load_run  # noqa: E402
from trace_doctor.model import Finding  # noqa: E402
from trace_doctor.report.html import write_html  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"

SHAPE_OPACITIES = """(id) => {
  const plot = document.getElementById(id);
  const out = {};
  (plot.layout.shapes || []).forEach(s => { if (s.name) { out[s.name] = s.opacity; } });
  return out;
}"""


def test_health_marks_highlight_and_fit_a_phone(tmp_path):
    result = analyze(load_run(ROOT / "fixtures" / "training" / "rl_sync_healthy"))
    base = len(result.findings)
    result.findings += [
        Finding("entropy-collapse", "TD205", "warning", "Entropy collapsing", "0.45 -> 0.02", "raise temperature",
                steps=list(range(40, 60))),
        Finding("training-instability", "TD206", "error", "NaN entropy", "NaN at step 17", "lower the LR",
                steps=[17], evidence={"metric": "optim/entropy"}),
    ]  # fmt: skip
    path = tmp_path / "health.html"
    write_html(result, path)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            opened = Opened(browser.new_page(viewport={"width": 1366, "height": 900}), path.resolve().as_uri())
            page = opened.page
            assert_healthy_page(opened, result)
            assert page.locator("#training-health .health-plot").count() == 5
            before = page.evaluate(SHAPE_OPACITIES, "chart-health-entropy")
            assert before[f"finding-{base}"] == before[f"finding-{base + 1}"] > 0
            page.click(f'button.show-on-timeline[data-finding="{base + 1}"]')
            page.wait_for_timeout(300)
            after = page.evaluate(SHAPE_OPACITIES, "chart-health-entropy")
            assert after[f"finding-{base + 1}"] == 1 and after[f"finding-{base}"] < before[f"finding-{base}"]
            assert page.locator(f"#finding-{base + 1}.selected").count() == 1
            assert_fits_a_phone(page)
            ARTIFACTS.mkdir(exist_ok=True)
            page.locator("#training-health").screenshot(path=str(ARTIFACTS / "training-health-375px.png"))
            assert opened.errors == []
        finally:
            browser.close()
