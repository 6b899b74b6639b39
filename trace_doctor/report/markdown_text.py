r"""Text read from a run, made inert in GitHub-flavoured Markdown.

A model name, span name, path, file name or quoted log line is data: in a CI job summary it must
not become an image, a link, emphasis, a heading, a table column or raw HTML. One helper per place
such text goes: `inline` (prose and table cells), `prose` (a message: `inline`, but what it quotes
between backticks stays a code span), `code` (inside a code span), `html_text` (inside raw HTML
such as `<summary>`, where Markdown is not parsed). Text trace-doctor writes itself
(headings, table layout, labels) is not passed through them and reads as written.

    >>> print(inline("![x](https://evil.example/p.png) *run*"))
    \!\[x\](https\://evil.example/p.png) \*run\*
    >>> print(code("a`b|c"))
    ``a`b\|c``
"""

from __future__ import annotations

import html
import re

from trace_doctor.report.terminal_text import inert

# Characters with a meaning in inline Markdown (CommonMark + GFM tables and strikethrough), each
# escaped with a backslash: `[` `]` `!` (links, images), `*` `_` `~` (emphasis, strikethrough),
# backtick (code spans), `|` (table cells), `#` (headings), backslash itself. `<`, `>` and `&` are
# HTML-escaped instead (raw HTML, `<https://…>` autolinks, HTML comments, entities).
_SPECIAL = re.compile(r"([\\`*_\[\]!|~#])")
# GFM's extended autolinks need no brackets: `https://…`, `www.…`, `user@host.tld`. An escaped
# character in the middle is not part of the pattern GitHub looks for.
_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9+.\-])(:)(?=//)|(?<=\bwww)(\.)|(@)")
# A line starting like a block (list item, ordered item, setext underline, thematic break).
_BLOCK_START = re.compile(r"^(\s*)([-+=]|\d{1,9}[.)])")
# A code span cannot hold a newline in a table row; none of these may end up in one.
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029]+")


def _cut(text: object, limit: int | None) -> str:
    # Control and bidi characters shown as escapes: a report printed to a terminal must not act on
    # them, and a rendered one must not reorder or hide a name (terminal_text.py). A CRLF is a line
    # break, which each helper lays out its own way.
    value = inert(("" if text is None else str(text)).replace("\r\n", "\n"))
    if limit is not None and len(value) > limit:
        value = value[: limit - 1] + "…"
    return value


def inline(text: object, limit: int | None = None, *, breaks: str = "<br>") -> str:
    """Inert inline Markdown: every special character escaped, newlines as `breaks`, cut at `limit`."""
    value = _cut(text, limit)
    value = html.escape(value, quote=False)
    value = _SPECIAL.sub(r"\\\1", value)
    value = _AUTOLINK.sub(lambda m: "\\" + m[0], value)
    lines = [_BLOCK_START.sub(r"\1\\\2", line) for line in value.replace("\r\n", "\n").split("\n")]
    return breaks.join(line.replace("\r", " ") for line in lines)


def code(text: object, limit: int | None = None, *, table: bool = True) -> str:
    """A code span holding `text` literally: a fence longer than any backtick run inside it.

    In a table row, `|` is escaped (GFM removes the backslash inside the span too); elsewhere it is
    left alone, since a backslash in a code span would show.
    """
    value = _LINE_BREAKS.sub(" ", _cut(text, limit))
    if table:
        value = value.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or not value.strip() else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def prose(text: object, limit: int | None = None, *, table: bool = True) -> str:
    """Inert Markdown that keeps the code spans of a message: what a rule put between backticks
    (a metric key, a quoted log line) shows as code, held literally by `code`; the rest is `inline`.

    Input with backticks of its own can pair them differently, never make anything live.
    """
    parts = _cut(text, limit).split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: the last one opens no span
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(inline(part))
        elif part.strip() and not _LINE_BREAKS.search(part):
            out.append(code(part, table=table))
        else:
            out.append(inline(f"`{part}`"))
    return "".join(out)


def html_text(text: object, limit: int | None = None) -> str:
    """Text inside raw HTML (`<summary>`): HTML-escaped, on one line (a blank line would end the HTML block)."""
    return html.escape(_LINE_BREAKS.sub(" ", _cut(text, limit)), quote=False)
