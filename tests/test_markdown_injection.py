"""Markdown output is inert: input (model names, paths, file names, quoted log lines) never becomes
a link, an image, emphasis, a heading, a table column or raw HTML in a CI job summary.

The oracle renders the output with markdown-it-py in its GFM-like mode with linkify (bare URLs,
`www.` and e-mail autolinks, as GitHub makes them) and walks the tokens.
"""

from __future__ import annotations

import html
import json
import re
import shutil

import pytest
from ci_fixtures import step_times, write_sl_run
from conftest import FIXTURE_RUNS
from markdown_it import MarkdownIt

from trace_doctor.api import analyze, compare, load_run
from trace_doctor.fleet import analyze_sources
from trace_doctor.report.bundle import support_summary
from trace_doctor.report.fleet import render_fleet_markdown
from trace_doctor.report.markdown import render_markdown
from trace_doctor.report.markdown_text import code, inline, prose
from trace_doctor.runs import split_runs
from trace_doctor.settings import Settings

PAYLOADS = [
    "![img](https://evil.com/p.png)",
    "[click](https://evil.com/l)",
    "[ref][1]\n\n[1]: https://evil.com/r",
    "<https://evil.com/auto>",
    "https://evil.com/bare",
    "www.evil.com",
    "mail@evil.com",
    "*em* _em_ **strong** __strong__ ~~strike~~ ~one~",
    "`tick` ``two``",
    "| pipe | cell |",
    "<!-- comment --> <img src=x onerror=alert(1)> <script>alert(1)</script>",
    "# heading",
    "&lt;b&gt; &amp; &#x3C;",
]
HOSTILE = " ".join(PAYLOADS)
# The HTML trace-doctor writes itself; any other tag in the output came from input.
OWN_TAGS = re.compile(r"</?(details|summary|b|br|sub|code)>")
OWN_HEADINGS = re.compile(
    r"^(trace-doctor( — fleet| escalation bundle)?|Findings( \(\d+\))?|Baseline comparison|Identifiers"
    r"|Where the time went|Step timing|Training machine \(as the run recorded it\)"
    r"|Analysed on \(the machine that ran trace-doctor, not the training machine\)|Inputs read)$"
)
# Payloads that are live Markdown on their own; the others (backticks, pipes, entities) change the
# layout or the text shown, checked by what the reader sees.
LIVE_ALONE = [p for p in PAYLOADS if not p.startswith(("`", "|", "&"))]


def gfm() -> MarkdownIt:
    return MarkdownIt("gfm-like")


def live_nodes(markdown: str) -> list[str]:
    """What input could have turned into: links, images, emphasis, strikethrough, foreign HTML,
    headings we do not write, and table rows whose cell count differs from their header's."""
    found = []
    tokens = gfm().parse(markdown)
    header_cells = None
    cells = 0
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and not OWN_HEADINGS.match(tokens[i + 1].content):
            found.append(f"heading: {tokens[i + 1].content!r}")
        if token.type in ("html_block", "html_inline") and "<" in OWN_TAGS.sub("", token.content):
            found.append(f"html: {token.content.strip()!r}")
        if token.type == "thead_open":
            header_cells = None
        if token.type in ("tr_open",):
            cells = 0
        if token.type in ("th_open", "td_open"):
            cells += 1
        if token.type == "tr_close":
            if header_cells is None:
                header_cells = cells
            elif cells != header_cells:
                found.append(f"table row with {cells} cells under {header_cells}")
        for child in token.children or []:
            if child.type in ("link_open", "image", "em_open", "s_open"):
                found.append(f"{child.type}: {child.attrs or child.content!r}")
            if child.type == "html_inline" and "<" in OWN_TAGS.sub("", child.content):
                found.append(f"html: {child.content!r}")
        if token.type == "inline" and any(c.type == "strong_open" for c in token.children or []):
            # We write **Gate: ...**, **Fix:**, **total**, **<verdict>**: bold never holds input.
            bold = re.findall(r"\*\*(.+?)\*\*", token.content)
            found += [f"strong: {b!r}" for b in bold if "evil" in b or "strong" in b]
    return found


@pytest.mark.parametrize("payload", LIVE_ALONE)
def test_the_oracle_sees_each_payload_live_when_not_escaped(payload):
    """The check below can fail: every raw payload is live Markdown to it (the heading needs its own line)."""
    assert live_nodes(f"| a |\n|---|\n| {payload} |\n\n{payload}\n")


@pytest.mark.parametrize("payload", PAYLOADS)
def test_each_helper_makes_each_payload_inert(payload):
    for text in (inline(payload), prose(f"x `{payload}` y {payload}", table=False)):
        assert live_nodes(f"{text}\n") == [], text
    assert live_nodes(f"| a |\n|---|\n| {prose(payload)} |\n") == []
    table = f"| a | b |\n|---|---|\n| {inline(payload)} | {code(payload)} |\n"
    assert live_nodes(table) == []
    # The reader sees the input as it was: every character in its cell, nothing eaten by a pipe,
    # a code span or an entity.
    cells = [t.content for t in gfm().parse(table) if t.type == "inline"][2:]
    assert [_shown(cell) for cell in cells] == [" ".join(payload.split())] * 2


def _shown(inline_source: str) -> str:
    """The text a reader sees in one rendered cell, whitespace collapsed."""
    rendered = gfm().renderInline(inline_source).replace("<br>", " ")
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", rendered)).split())


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """A run whose folder, model, renderer, metric names, log lines and file names are Markdown."""
    root = tmp_path_factory.mktemp("md") / "run ![f](www.evil.com) [l](x) *e* #h `t` |p|"
    write_sl_run(root, step_times(12, 1.0))
    config = json.loads((root / "config.json").read_text())
    config["model_name"] = "![m](https://evil.com/m.png) [Qwen](https://evil.com) <!-- c -->"
    config["renderer_name"] = "*bold* | pipe"
    (root / "config.json").write_text(json.dumps(config))
    with open(root / "logs.log", "a", encoding="utf-8") as log:
        for i, payload in enumerate(PAYLOADS):
            log.write(f"root:{200 + i} [ERROR] RuntimeError: {payload.replace(chr(10), ' ')}\n")
        log.write(f"root:300 [ERROR] ValueError: x` {HOSTILE.replace(chr(10), ' ')} `y\n")
        log.write("root:301 [ERROR] KeyError: first\n- item\n1. first\n> quote\n---\n# heading\n")
    with open(root / "metrics.jsonl", "a", encoding="utf-8") as metrics:
        metrics.write('{"step": 99, "bad": ' + json.dumps(HOSTILE)[:-1] + "\n")  # a cut line: an ingest warning
    (root / "x [l](www.evil.com) *e* ![i](y).log").write_text("root:1 [ERROR] OSError: ![i](https://evil.com/i.png)\n")
    return root


def test_single_run_markdown_is_inert_and_still_says_what_it_read(hostile_run):
    result = compare(load_run(hostile_run), load_run(hostile_run))
    markdown = render_markdown(result)
    assert live_nodes(markdown) == []
    # The payloads are shown (as text), and what trace-doctor writes itself reads as written.
    rendered = gfm().render(markdown)
    assert "![m](https://evil.com/m.png)" in rendered and "KeyError: first" in rendered
    assert markdown.startswith("# trace-doctor\n") and "## Findings (" in markdown and "**Fix:**" in markdown
    assert "## Baseline comparison" in markdown


def test_fleet_markdown_is_inert(hostile_run, tmp_path):
    shutil.copytree(hostile_run, tmp_path / hostile_run.name)
    shutil.copytree(FIXTURE_RUNS / "sl_steady_slow", tmp_path / "steady")
    fleet = analyze_sources(split_runs([tmp_path]).runs, Settings(), jobs=1, fmt="markdown")
    markdown = render_fleet_markdown(fleet)
    assert live_nodes(markdown) == []
    assert "![f](www.evil.com)" in gfm().render(markdown)


def test_bundle_summary_is_inert(hostile_run):
    assert live_nodes(support_summary(analyze(load_run(hostile_run)))) == []
