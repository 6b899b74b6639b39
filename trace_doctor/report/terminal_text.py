r"""Text read from a run, made inert on a terminal: shown, never obeyed.

A model name, span name, path or quoted log line can hold bytes a terminal acts on: ESC and the C1
controls start sequences that recolour, move the cursor, clear the screen, set the window title
or swallow the output after them (an OSC with its terminator removed); a carriage return or
backspace overwrites what was printed; bidi and zero-width format characters reorder or hide
text, so a name reads as another. Each such character is shown as its escape instead (`\x1b`,
`\u202e`), which says the name holds it. Tabs and newlines are layout and kept; everything else
(any script, emoji, U+FFFD) is text and kept.

    >>> inert("qwen\x1b[2J\u202eevil")
    'qwen\\x1b[2J\\u202eevil'
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls; bidi embeddings, overrides, isolates and
# marks; zero-width spaces, joiners and invisible operators; line/paragraph separators; BOM.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff]"
)


def _escaped(match: re.Match) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """`text` with every character a terminal would act on (or hide text with) shown as its escape."""
    return _UNSAFE.sub(_escaped, text) if _UNSAFE.search(text) else text
