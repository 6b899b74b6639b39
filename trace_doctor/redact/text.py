"""Redact one string, or one JSON-like value, in a single pass of the scanner (shapes.py).

What is kept on purpose, so a bundle stays useful: numbers (step ids, counts), UUIDs (session and
training-run ids), hex digests under weak words (a checkpoint's sha256, a cache key, a commit id),
names made of words (`optim/kl_sample_train_v1`, `Qwen/Qwen3-8B`). None of them has a vendor prefix,
a userinfo `@`, or a strong word (`api_key`, `password`, `secret`, ...) in front of it; a weak word
(`key`, `token`) redacts only a value that looks like a credential (`credential_like`).
"""

from __future__ import annotations

import base64
import binascii
import re
from itertools import pairwise
from typing import Any

from trace_doctor.redact.shapes import (
    AWS_KEY_IDS,
    KEY_BLOCK_END,
    KEY_BLOCK_START,
    KEY_BLOCKS,
    PASSWORD_WORDS,
    REDACTED,
    SCANNER,
    STRONG_WORDS,
    TRIGGER,
)

# Key-name suffixes that say the value is about a credential, not the credential itself.
NOT_SECRET_SUFFIXES = frozenset(
    {
        "error",
        "exception",
        "warning",
        "count",
        "counts",
        "len",
        "length",
        "size",
        "id",
        "ids",
        "name",
        "names",
        "path",
        "file",
        "dir",
        "type",
        "env",
        "var",
        "url",
        "endpoint",
        "limit",
        "budget",
        "usage",
        "expiry",
        "expires",
        "ttl",
    }
)
_STRONG = re.compile(f"(?i){STRONG_WORDS}")
_WORDS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9+/=_\-.~%]+")
_NAME_PIECE = re.compile(r"[A-Za-z]+[0-9]{0,2}|[0-9]{1,4}|[0-9]+[A-Za-z]")
_HEX = re.compile(r"[0-9a-fA-F]+")
_NUMBER = re.compile(r"-?[0-9][0-9_,]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
# Values that stand for a secret without being one: already redacted, masked, empty, a reference.
_PLACEHOLDER = re.compile(r"(?i)\[?redacted\]?.*|\**|x{3,}|<[^>]*>?|none|null|nil|true|false|undefined|\$\{?\w+\}?")


def credential_like(value: str, *, hex_ok: bool = False) -> bool:
    """Whether a value looks like a token: 16+ token characters, letters and digits, not a name or path.

    A pure-hex value counts only with `hex_ok` (a weak word before a hex string names a digest).
    """
    if len(value) < 16 or not _TOKEN_CHARS.fullmatch(value):
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    if value.startswith(("/", "./", "~/")) or "://" in value:
        return False
    if _HEX.fullmatch(value):
        return hex_ok
    pieces = [p for p in re.split(r"[/_.\-:]+", value) if p]
    # `optim/kl_sample_train_v1`, `Qwen/Qwen3-8B`, `2024-05-01`: words and small numbers.
    return not (len(pieces) > 1 and all(_NAME_PIECE.fullmatch(p) for p in pieces))


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORDS.split(name) if w]


def _is_word_end(word: str, tail: str) -> bool:
    """`token` in `token_limit` or `hfTokenCount` ends a word; in `tokenizer` or `TOKENIZER` it does not."""
    if not tail or not tail[0].isalpha():
        return True
    return word[-1].islower() and tail[0].isupper()


# A branch's handler returns what replaces the text from the match's start up to `resume`, where
# the scan goes on: the match's end, or an earlier point when part of it was not a secret and must
# still be scanned (so `key: https://user:pw@host` loses its password). The scan only moves forward.


def _keyword(match: re.Match) -> tuple[str, int]:
    word, tail, sep = match["kw_word"], match["kw_tail"], match["kw_sep"]
    group = next(g for g in ("kw_equoted", "kw_quoted", "kw_value") if match[g] is not None)
    value, start, end = match[group], match.start(group), match.end(group)
    head = match[0][: start - match.start()]
    quoted = group != "kw_value"
    if not _secret_value(word, tail, sep, value, quoted=quoted, env_name=_ends_env_name(match)):
        return head, start  # not named a secret: the value may still hold one (`token ghp_…`)
    for more in ("kw_more", "kw_pairs"):
        if match[more] is not None:
            # `password = correct horse battery staple`, `Cookie: a=1; b=2`: all of it
            end = match.end(more)
    return head + REDACTED, end


def _ends_env_name(match: re.Match) -> bool:
    """`AZURE_OPENAI_KEY=…`: an upper-case weak word ending an environment variable's name."""
    word, before = match["kw_word"], match.string[max(0, match.start() - 2) : match.start()]
    return word.isupper() and len(before) == 2 and before[1] == "_" and (before[0].isupper() or before[0].isdigit())


def _secret_value(word: str, tail: str, sep: str, value: str, *, quoted: bool = False, env_name: bool = False) -> bool:
    if not _is_word_end(word, tail):
        return False
    words = _words(tail)
    if (words and words[-1] in NOT_SECRET_SUFFIXES) or _PLACEHOLDER.fullmatch(value):
        return False
    if _STRONG.fullmatch(word) is None:
        # A weak word: only a value that looks like a token. A hex one is a digest (`cache key:
        # <sha256>`), except under an environment variable's name: Azure's keys are 32 hex digits.
        return credential_like(value, hex_ok=env_name and bool(sep.strip()))
    lower = word.lower()
    if lower == "pwd" and value.startswith(("/", "~")):
        return False  # the shell's PWD: a working directory
    if not sep.strip():
        # `password <value>` with no `=` or `:`: a netrc line, or prose (`password authentication
        # failed`); a quoted value there is given as one (`--password "correct horse"`).
        return quoted or credential_like(value, hex_ok=True) or _short_secret(value)
    if _NUMBER.fullmatch(value):
        return lower in PASSWORD_WORDS or len(value) >= 12
    return True


def _short_secret(value: str) -> bool:
    """After `password ` with no `=`/`:`: a netrc-style value (letters and digits, 8+ characters)."""
    return len(value) >= 8 and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _url(match: re.Match) -> tuple[str, int]:
    whole, base = match[0], match.start()
    password, user = match["url_password"], match["url_user"]
    if password:
        start, end = match.start("url_password") - base, match.end("url_password") - base
        return whole[:start] + REDACTED + whole[end:], match.end()
    if user and credential_like(user, hex_ok=True):
        start, end = match.start("url_user") - base, match.end("url_user") - base
        return whole[:start] + REDACTED + whole[end:], match.end()
    return whole[: match.start("url_user") - base], match.start("url_user")  # a token shape in it is found next


def _wandb(match: re.Match) -> tuple[str, int]:
    if match["wandb_key_before"] is not None:
        return REDACTED, match.end()
    # The text between the mention and the key is at most 80 characters: scanned on its own. The
    # hex letters gluing the key to a word (`wandb_upload<key>`) stay with the word.
    context, glue = match["wandb_context"], match.string[match.end("wandb_context") : match.start("wandb_key")]
    return context[:1] + _scan(context[1:]) + glue + REDACTED, match.end()


_PATH_WORD = re.compile(r"[A-Za-z][a-z]{2,}")


def _random_token(value: str) -> bool:
    """Upper-case and lower-case letters and digits, and not a path of words: a random base64 key,
    never a hex digest, a name or `u0000/Users/me/Projects/env/bin/tool` (a profile's call stack)."""
    if not (any(c.isupper() for c in value) and any(c.islower() for c in value) and any(c.isdigit() for c in value)):
        return False
    return sum(1 for piece in value.split("/") if _PATH_WORD.fullmatch(piece)) < 2


def _aws(match: re.Match) -> tuple[str, int]:
    """40 base64 characters on a line that names AWS: a secret access key when it looks random."""
    context = match["aws_context"]
    head = context[:1] + _scan(context[1:])
    if _random_token(match["aws_secret"]):
        return head + REDACTED, match.end()
    return head, match.start("aws_secret")


# Right after the id and a `/` (`AKIA…/<secret>`: the secret's alphabet has `/`), or later on the line.
_AWS_SECRET_AFTER = re.compile(
    r"(?:/|[^\n]{0,80}?(?<![A-Za-z0-9+/]))(?P<aws_secret>[A-Za-z0-9+/]{40})(?![A-Za-z0-9+/=])"
)


def _token(match: re.Match) -> tuple[str, int]:
    """A vendor token; after an AWS access key id, the secret key logged with it goes too
    (`AKIA…/<secret>`, `creds AKIA… <secret>`)."""
    if match[0].startswith(AWS_KEY_IDS):
        after = _AWS_SECRET_AFTER.match(match.string, match.end())
        if after is not None and _random_token(after["aws_secret"]):
            return REDACTED + _scan(match.string[match.end() : after.start("aws_secret")]) + REDACTED, after.end()
    return REDACTED, match.end()


def _decoded(value: str) -> str | None:
    """A base64 value (either alphabet, padding optional) decoded as text; None when it is not base64."""
    value = value.rstrip("=")
    value = value[: len(value) - len(value) % 4] if len(value) % 4 == 1 else value
    try:
        data = base64.b64decode(
            value + "=" * (-len(value) % 4), altchars=b"-_" if "-" in value or "_" in value else None
        )
    except (binascii.Error, ValueError):
        return None
    return data.decode("utf-8", "replace")


def _basic(match: re.Match) -> tuple[str, int]:
    """`Basic <base64>`: HTTP basic credentials when the value decodes to `user:password`."""
    head = match.string[match.start() : match.start("basic")]
    decoded = _decoded(match["basic"])
    if decoded is not None and ":" in decoded and decoded.isprintable():
        return head + REDACTED, match.end()
    return head, match.start("basic")


def _base64(match: re.Match) -> tuple[str, int]:
    """A value starting like an encoded vendor token: redacted when its decoding holds a credential."""
    decoded = _decoded(match["b64"])
    if decoded is not None and _scan(decoded) != decoded:
        return REDACTED, match.end()
    return match[0], match.end()


def _pem_line(match: re.Match) -> tuple[str, int]:
    line = match["pem_line"] if match["pem_line"] is not None else match["pem_last"]
    head = match.string[match.start() : match.end() - len(line)]
    return head + (REDACTED if _random_token(line) else line), match.end()


_HANDLERS = {
    "url": _url,
    "token": _token,
    "wandb_key": _wandb,
    "wandb_key_before": _wandb,
    "aws_secret": _aws,
    "basic": _basic,
    "pem_line": _pem_line,
    "pem_last": _pem_line,
    "b64": _base64,
    "kw_word": _keyword,
}

# What a private key's body is made of (base64, line breaks, JSON-escaped ones), read back from its END line.
_KEY_BODY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\\ \t\r\n")


def _key_body_before(segment: str) -> str:
    """`segment` with the key body that ends it (up to an END line whose BEGIN is not in the text) redacted."""
    start = len(segment)
    while start and segment[start - 1] in _KEY_BODY_CHARS:
        start -= 1
    body = segment[start:]
    if sum(c.isalnum() for c in body) < 16:
        return segment
    kept = body[len(body.rstrip(" \t\r\n")) :]
    return segment[:start] + REDACTED + kept


# Above this many characters a text is scanned line by line, and only the lines polars finds the
# scanner's vocabulary in (shapes.TRIGGER, native code) go through the Python scanner: 25-35x the
# throughput on logs (benchmarks/RESULTS.md). No match of the scanner crosses a newline except a
# private-key block, so those are redacted over the whole text first.
LINE_SPLIT_CHARS = 64 * 1024


def redact_text(text: str) -> str:
    """`text` with every credential replaced by [REDACTED]; the same object when there is none."""
    if not text:
        return text
    if len(text) <= LINE_SPLIT_CHARS:
        return _scan(text)
    if KEY_BLOCK_START in text or KEY_BLOCK_END in text:
        text = _scan(text, KEY_BLOCKS)  # the one match that spans lines, first
    return _redact_lines(text)


def _redact_lines(text: str) -> str:
    import polars as pl

    lines = text.split("\n")
    hits = pl.Series(lines, dtype=pl.String).str.contains(TRIGGER).arg_true().to_list()
    if not hits:
        return text
    for i in hits:
        lines[i] = _scan(lines[i])
    return "\n".join(lines)


def _scan(text: str, scanner: re.Pattern = SCANNER) -> str:
    """One left-to-right pass of `scanner` over `text`, each match replaced as its branch says."""
    match = scanner.search(text)
    if match is None:
        return text
    out: list[str] = []
    pos = 0
    while match is not None:
        if match["block_tail"] is not None:  # an END line whose BEGIN is not in the text
            out.append(_key_body_before(text[pos : match.start()]) + match[0])
            pos = match.end()
        elif match["block"] is not None:
            out.append(text[pos : match.start()])
            end = text.find(KEY_BLOCK_END, match.end())
            if end < 0:  # cut off before its END line: everything after it goes
                out.append(match[0] + REDACTED)
                return "".join(out)
            close = text.find("-----", end + len(KEY_BLOCK_END))
            pos = len(text) if close < 0 else close + 5
            out.append(match[0] + REDACTED + text[end:pos])
        else:
            out.append(text[pos : match.start()])
            group = next(name for name in _HANDLERS if match[name] is not None)
            replacement, pos = _HANDLERS[group](match)
            out.append(replacement)
        match = scanner.search(text, pos)
    out.append(text[pos:])
    return "".join(out)


def is_secret_key(name: str, value: Any = None) -> bool:
    """Whether a key or variable name says its value is a credential.

    Strong words (`api_key`, `password`, `secret`, `credentials`, ...) always; weak ones (`key`,
    `token`, `auth`, `sig`) only for a credential-looking string value. Whole words only, so
    `max_tokens`, `tokenizer` and `monkey` are not; `key_path` or `TokenError` name no secret.
    """
    words = _words(str(name))
    if not words or words[-1] in NOT_SECRET_SUFFIXES:
        return False
    # Words joined back pairwise too, so `api_key` / `apiKey` / `API-KEY` are found as one word.
    pairs = [a + b for a, b in pairwise(words)]
    if any(_STRONG.fullmatch(w) for w in (*words, *pairs)):
        return True
    if any(w in ("token", "key", "auth", "sig", "signature") for w in words):
        return isinstance(value, str) and credential_like(value)
    return False


def redact_value(value: Any) -> Any:
    """A JSON-like value with secrets removed: values under secret keys, secrets in keys and strings.

    Booleans, and numbers except under a password word, are kept (`max_tokens: 512`, `use_auth:
    true`); a dict or list under a secret key keeps its shape with every leaf redacted.
    """
    return _redact_value(value, frozenset())


def _redact_value(value: Any, context: frozenset[str]) -> Any:
    """`redact_value` within `context`: the vendors (`aws`, `wandb`) named by an enclosing key, a
    sibling key or a sibling value (an access key id), for the keys with no prefix they use."""
    if isinstance(value, dict):
        context = context | _vendor_context(value)
        out = {}
        for key, item in value.items():
            name = redact_text(key) if isinstance(key, str) else key
            number = isinstance(item, (int, float)) and not isinstance(item, bool)
            if number and PASSWORD_WORDS.intersection(_words(str(key))):
                out[name] = REDACTED  # a numeric password is still a password
            elif isinstance(item, str) and _unprefixed_vendor_key(str(key), item, context):
                out[name] = REDACTED
            elif item is None or isinstance(item, (bool, int, float)) or not is_secret_key(str(key), item):
                out[name] = _redact_value(item, context | _vendor_context({key: None}))
            elif isinstance(item, (dict, list, tuple)):
                out[name] = _blank(item)
            elif isinstance(item, str) and _PLACEHOLDER.fullmatch(item):
                out[name] = item
            else:
                out[name] = REDACTED
        return out
    if isinstance(value, list):
        return [_redact_value(v, context) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact_value(v, context) for v in value)
    if isinstance(value, str):
        return redact_text(value)
    return value


_AWS_KEY_ID = re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}")
_AWS_SECRET_VALUE = re.compile(r"[A-Za-z0-9+/]{40}")
_WANDB_KEY_VALUE = re.compile(r"[0-9a-f]{40}")
_KEY_WORDS = frozenset({"key", "token", "auth", "secret", "apikey", "credential", "credentials", "password"})


def _vendor_context(mapping: dict) -> frozenset[str]:
    """The vendors a mapping's keys name (`aws_…`, `wandb`) or whose access key id it holds."""
    named = {w for key in mapping for w in _words(str(key)) if w in ("aws", "wandb")}
    if any(isinstance(v, str) and _AWS_KEY_ID.fullmatch(v) for v in mapping.values()):
        named.add("aws")
    return frozenset(named)


def _unprefixed_vendor_key(key: str, value: str, context: frozenset[str]) -> bool:
    """An AWS secret key (40 random base64 characters) beside an access key id or under an `aws` key,
    whatever its own key is called (`sk`, `value`); a W&B key (40 hex) under a key-like name within
    `wandb` (`wandb: {key: …}`, `wandb_key`), never a commit id (`wandb: {git_commit: …}`)."""
    if "aws" in context and _AWS_SECRET_VALUE.fullmatch(value) and _random_token(value):
        return True
    if "wandb" in context and _WANDB_KEY_VALUE.fullmatch(value):
        words = _words(key)
        pairs = {a + b for a, b in pairwise(words)}
        return bool(_KEY_WORDS.intersection(words) | _KEY_WORDS.intersection(pairs))
    return False


def _blank(value: Any) -> Any:
    """Everything under a secret key: the shape kept (support may need it), every leaf dropped."""
    if isinstance(value, dict):
        return {redact_text(k) if isinstance(k, str) else k: _blank(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_blank(v) for v in value]
    return REDACTED


def redact_argv(args: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A command line with secrets removed, a flag and its value read together.

    `--api-key=…` and `api_key=…` (chz style) are one element and redact as text; `--api-key …`
    puts the secret in the element after a flag that names it, which text alone cannot see.
    """
    out: list[str] = []
    for i, arg in enumerate(args):
        flag = args[i - 1] if i else ""
        named = flag.startswith("-") and "=" not in flag and is_secret_key(flag.lstrip("-"), arg)
        if named and not _PLACEHOLDER.fullmatch(arg):
            out.append(REDACTED)
        else:
            out.append(redact_text(arg))
    return tuple(out)
