"""What a credential looks like in text: vendor token shapes, URL credentials, private-key blocks,
values named by key-like words. One spelling of each, compiled into one scanner.

`SCANNER` is a single alternation that finds every candidate in one left-to-right pass; text.py
decides per match. It runs in linear time: every branch starts at a boundary that a run of the
same characters cannot repeat (a lookbehind), and every repetition is bounded, possessive (`{m,n}+`:
what follows can never be one of its characters, so giving some back could not help), or spans one
character class with nothing after it; a failed attempt costs a bounded number of steps and the
scan never restarts inside a run it already read.

`TRIGGER` is the same vocabulary without lookarounds (polars' Rust regex has none), looser than
the scanner: a string it does not match cannot hold anything the scanner would redact, so tables
only send the strings it matches through the Python scanner.
"""

from __future__ import annotations

import base64
import re

from trace_doctor.knowledge.tinker import API_KEY_PREFIX

REDACTED = "[REDACTED]"

# A token starts where no letter or digit precedes it, or right after a JSON escape (`\n`,
# `\u0022`): span arguments and parsed log fields are kept as JSON text, where a key after an
# escaped newline is preceded by the letter `n`.
START = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrtbf])|(?<=\\u[0-9A-Fa-f]{4}))"

# Vendor credentials recognisable by their shape alone, wherever they appear (a value, a metric
# name, a file name). Lengths are the vendors' minimums or less, never more, so no real key is
# too short to match; the prefixes make them precise (an id or a digest never starts with them).
VENDOR_TOKENS: dict[str, str] = {
    # The SDK's own keys (knowledge.tinker.API_KEY_PREFIX).
    "tinker": re.escape(API_KEY_PREFIX) + r"[A-Za-z0-9_\-]{8,}",
    "anthropic": r"sk-ant-[A-Za-z0-9_\-]{20,}",
    "openai": r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    "stripe": r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,}",
    "huggingface": r"hf_[A-Za-z0-9]{20,}",
    "slack": r"xox[abeoprs]-[A-Za-z0-9\-]{10,}|xapp-[A-Za-z0-9\-]{10,}",
    "github": r"gh[opsur]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}",
    "gitlab": r"glpat-[A-Za-z0-9_\-]{20,}",
    # Access key ids of long-lived (AKIA) and temporary (ASIA) credentials: exactly 20 characters.
    "aws": r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])",
    "google": r"AIza[A-Za-z0-9_\-]{35}",
    "npm": r"npm_[A-Za-z0-9]{36}",
    "pypi": r"pypi-[A-Za-z0-9_\-]{50,}",
    "groq": r"gsk_[A-Za-z0-9]{40,}",
    "xai": r"xai-[A-Za-z0-9]{40,}",
    "replicate": r"r8_[A-Za-z0-9]{30,}",
    "sendgrid": r"SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}",
    # Incoming-webhook URLs: whoever has the path can post to the channel (training scripts use
    # them for run notifications). The host starts the match, so what is kept is `https://`.
    "slack_webhook": r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_\-/]{20,}",
    "discord_webhook": r"discord(?:app)?\.com/api/webhooks/[0-9]{5,}+/[A-Za-z0-9_\-]{20,}",
    # A JWT (header.payload.signature, base64url): Tinker also accepts one as its API key.
    "jwt": r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{8,}",
}
# The literal every vendor shape starts with (the polars prefilter's vocabulary, TRIGGER below).
VENDOR_PREFIXES = (
    API_KEY_PREFIX,
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "rk_test_",
    "whsec_",
    "hf_",
    *(f"xox{c}-" for c in "abeoprs"),
    "xapp-",
    *(f"gh{c}_" for c in "opsur"),
    "github_pat_",
    "glpat-",
    "AKIA",
    "ASIA",
    "ABIA",
    "ACCA",
    "AIza",
    "npm_",
    "pypi-",
    "gsk_",
    "xai-",
    "r8_",
    "SG.",
    "hooks.slack.com/",
    "discord.com/api/webhooks/",
    "discordapp.com/api/webhooks/",
    "eyJ",
)

# `scheme://user:password@host` (database URLs, git remotes with a token, proxies). The password
# may hold `@` (greedy up to the last one before the host); a user part alone is redacted only
# when it looks like a token (text.py), so `ssh://git@github.com` stays.
URL_USERINFO = (
    r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{1,30}+://"
    r"(?P<url_user>[^\s/?#@:'\"<>\\]{0,256}+)(?::(?P<url_password>[^\s/?#'\"<>\\]{0,256}))?@"
)

# `-----BEGIN RSA PRIVATE KEY-----` (PKCS#1/#8, EC, OpenSSH, encrypted, PGP): text.py redacts from
# here to the matching END line, or to the end of the text when it was cut off.
KEY_BLOCK_START = "-----BEGIN "
KEY_BLOCK = re.escape(KEY_BLOCK_START) + r"(?:[A-Z0-9]+ ){0,4}PRIVATE KEY(?: BLOCK)?-----"
KEY_BLOCK_END = "-----END "

# The END line of a private-key block: text.py also redacts the key's body before it when the
# BEGIN line is not in the same text (a log record per line, a text cut off before BEGIN).
KEY_BLOCK_TAIL = r"-----END (?:[A-Z0-9]+ ){0,4}PRIVATE KEY(?: BLOCK)?-----"
# A line of a PEM body (64 base64 characters, OpenSSH 70, other writers up to 76) standing alone, as
# it does when a key is logged one record per line and the BEGIN/END lines are other records; and its last, shorter
# line, padded with `=`, when it is a whole line of its own. text.py redacts only one with
# upper-case letters, lower-case letters and digits (never a hex digest).
PEM_LINE = (
    r"(?:(?<![A-Za-z0-9+/=])|(?<=\\n))(?P<pem_line>[A-Za-z0-9+/]{60,80}+)(?![A-Za-z0-9+/=])"
    r"|(?:\A|(?<=\n))[ \t]*+(?P<pem_last>[A-Za-z0-9+/]{12,75}+={1,2})(?=[ \t\r]*+(?:\n|\Z))"
)

# W&B API keys are 40 lowercase hex characters: the shape of a git commit id too, so one is
# redacted only on a line that names W&B before it (`WANDB_API_KEY=…`, `wandb login …`, a netrc
# line for api.wandb.ai) or just after it (`<key>  # wandb`, 12 characters at most). Inside an identifier the key may be
# glued to the word before it (`wandb_upload` + key: a function name, a file name), so up to six
# hex letters before it are allowed after a letter that is not hex.
_GLUED_HEX = r"(?:(?<![0-9a-f])|(?<=[g-zA-Z])[a-f]{1,6})"
WANDB_KEY = (
    r"(?P<wandb_context>(?i:wandb|w&b)[^\n]{0,80}?)" + _GLUED_HEX + r"(?P<wandb_key>[0-9a-f]{40})(?![0-9a-f])"
    r"|(?<![0-9a-f])(?P<wandb_key_before>[0-9a-f]{40})(?![0-9a-f])(?=[^\n]{0,12}?(?i:wandb|w&b))"
)

# AWS secret access keys are 40 base64 characters with no prefix: redacted only on a line that
# names AWS before them, or after an access key id (text.py's token handler looks ahead for one).
AWS_SECRET_CHARS = r"(?<![A-Za-z0-9+/])(?P<aws_secret>[A-Za-z0-9+/]{40})(?![A-Za-z0-9+/=])"
AWS_SECRET = r"(?P<aws_context>(?<![A-Za-z])(?i:aws)(?![a-z])[^\n]{0,80}?)" + AWS_SECRET_CHARS
AWS_KEY_IDS = ("AKIA", "ASIA", "ABIA", "ACCA")

# `Basic <base64 of user:password>` (HTTP basic auth) wherever it appears, named or not.
BASIC_AUTH = r"(?<![A-Za-z0-9])(?i:basic)[ \t]{1,3}(?P<basic>[A-Za-z0-9+/]{8,512}+={0,2}+)(?![A-Za-z0-9+/=])"


def _encoded_prefix(prefix: str, alphabet: bytes) -> str:
    """The base64 characters every encoding of a text starting with `prefix` starts with."""
    full = len(prefix.encode()) * 8 // 6  # characters whose six bits all come from the prefix
    return base64.b64encode(prefix.encode(), altchars=alphabet).decode()[:full]


# A vendor token or a private-key block base64-encoded (a Kubernetes secret's data, a variable
# holding the encoded key): the encoding of its prefix starts the value, in either base64 alphabet.
# text.py decodes it and redacts it only when the decoded text holds a credential.
BASE64_PREFIXES = sorted(
    {_encoded_prefix(p, alt) for p in (*VENDOR_PREFIXES, KEY_BLOCK_START) for alt in (b"+/", b"-_")},
    key=lambda p: (-len(p), p),
)
BASE64_TOKEN = "(?P<b64>(?:" + "|".join(map(re.escape, BASE64_PREFIXES)) + r")[A-Za-z0-9+/_\-]{8,4096}+={0,2}+)"

# Words that name a credential in a key, a variable, a header or prose. Strong words name a secret
# whatever its value looks like; weak ones (`key`, `token`, ...) also name harmless things (a sort
# key, a token count), so their value is redacted only when it looks like a credential.
STRONG_WORDS = (
    r"api[_\-]?key|access[_\-]?key|secret[_\-]?key|private[_\-]?key|account[_\-]?key"
    r"|shared[_\-]?access[_\-]?(?:key|signature)|(?:access|refresh|auth|id|session|bearer)[_\-]?token"
    r"|client[_\-]?secret|secrets?|credentials?|passw(?:or)?d|passphrase|pwd|authorization|cookie|bearer"
)
WEAK_WORDS = r"token|key|auth|sig(?:nature)?"
PASSWORD_WORDS = frozenset({"password", "passwd", "passphrase", "pwd"})
# `name<sep>value`: `=`, `:`, `:=`, `=>` (quotes around the name allowed, JSON-escaped ones too),
# their URL encodings (`client_secret%3D…` inside an encoded redirect URL), prose `is` / `was` /
# `is:`, or plain spaces (CLI flags, netrc lines, `Bearer <token>`: only values that look like
# credentials). A name starts a word, or a camelCase part of one (`dbPassword`).
KEYWORD_SEPARATOR = (
    r"(?P<kw_sep>(?:\\?[\"']?[ \t]{0,3}|[ \t]{1,3}(?i:is|was)[ \t]{0,3})(?P<kw_assign>:=|=>|[:=]|%3[DdAa])[ \t]{0,3}"
    r"|[ \t]{1,3}(?i:is|was)[ \t]{1,3}|[ \t]{1,3})"
)
# A quoted value runs to its closing quote, escapes included: in `"pw": "ab\"cd"` the secret is
# all of `ab\"cd`, not `ab`. Span arguments are JSON text kept inside JSON, where the quotes are
# themselves escaped (`\"pw\": \"ab\\\"cd\"`): there the value ends at a `\"` that is not part of
# an escaped escape (`\\\"`, `\\\\`, `\\n`), and the other escapes (`\n`, `\u0022`) are characters.
QUOTED_VALUE = r"(?:(?!(?P=kw_quote))[^\\\n]|\\[^\n]){1,512}+"
ESCAPED_QUOTED_VALUE = r"(?:(?!(?P=kw_equote))[^\\\n]|\\\\\\[^\n]|\\\\[^\\\n]|\\[^\"'\\\n]){1,512}+"
# An unquoted value is one word; a password's may go on over spaces (`password = correct horse
# battery staple` in an .env or .ini line) up to the next `name=` / `name:` (text.py decides).
UNQUOTED_WORD = r"[^\s\"'`<>,;&)}\]\\]{1,512}+"
NOT_A_NAME = r"(?![A-Za-z_][A-Za-z0-9_.\-]{0,40}+(?:[:=]|%3[DdAa]))"
MORE_WORDS = rf"(?:[ \t]{{1,3}}+{NOT_A_NAME}{UNQUOTED_WORD}){{1,16}}+"
COOKIE_PAIRS = r"(?:;[ \t]{0,2}+[^\s;\"'`<>\\]{1,512}+){1,64}+"
PASSWORD_WORD = r"passw(?:or)?d|passphrase|pwd"
KEYWORD = (
    rf"(?P<kw_word>(?i:(?P<kw_password>{PASSWORD_WORD})|(?P<kw_cookie>cookie)|{STRONG_WORDS}|{WEAK_WORDS}))"
    r"(?P<kw_tail>[A-Za-z0-9_.\-]{0,40}+)"
    + KEYWORD_SEPARATOR
    + r"(?P<kw_scheme>(?i:bearer|basic|token|digest)[ \t]{1,3})?"
    + rf"(?:\\(?P<kw_equote>[\"'])(?P<kw_equoted>{ESCAPED_QUOTED_VALUE})"
    + rf"|(?P<kw_quote>[\"'])(?P<kw_quoted>{QUOTED_VALUE})"
    # More words only after a password word and an `=`/`:` (a conditional: no other match pays for them).
    + rf"|(?P<kw_value>{UNQUOTED_WORD})(?(kw_password)(?(kw_assign)(?P<kw_more>{MORE_WORDS})?))"
    # A cookie header's other pairs (`Cookie: session=…; csrftoken=…`) are as secret as its first.
    + rf"(?(kw_cookie)(?(kw_assign)(?P<kw_pairs>{COOKIE_PAIRS})?)))"
)
# Vendor tokens and key-like names share one start test (evaluated once per position, not once
# per branch: most positions are inside a word and fail it at once).
SCANNER = re.compile(
    "|".join(
        [
            f"(?P<block>{KEY_BLOCK})",
            f"(?P<block_tail>{KEY_BLOCK_TAIL})",
            f"(?P<url>{URL_USERINFO})",
            WANDB_KEY,
            AWS_SECRET,
            BASIC_AUTH,
            PEM_LINE,
            f"{START}{BASE64_TOKEN}",
            rf"(?:{START}|(?<=[a-z0-9])(?=[A-Z]))(?:(?P<token>{'|'.join(VENDOR_TOKENS.values())})|{KEYWORD})",
        ]
    )
)
# Private-key blocks (and bodies ending at an END line) alone: redacted over a whole text before it
# is scanned line by line (text.py).
KEY_BLOCKS = re.compile(f"(?P<block>{KEY_BLOCK})|(?P<block_tail>{KEY_BLOCK_TAIL})")

# The scanner's vocabulary for polars (Rust regex: no lookarounds), looser than each branch it
# stands for, so every string the scanner would change matches it: a block's BEGIN or END line; a
# userinfo `@` after `://`; W&B and 40 hex characters on one line; AWS and 40 base64 characters
# later on the line; `basic` and a blank; 60 base64 characters or a line of them padded with `=`
# (PEM lines); the base64 encoding
# of a vendor prefix; a vendor prefix (those
# starting lower-case after a non-alphanumeric character or a JSON escape, as START requires); a
# key-like word that ends there (not followed by a lower-case letter: `tokens`, `keyboard` never
# match) and is followed by a separator. tests/test_redaction.py checks the superset property.
_LOWER_PREFIXES = [p for p in VENDOR_PREFIXES if p[0].islower()]
_UPPER_PREFIXES = [p for p in VENDOR_PREFIXES if not p[0].islower()]
TRIGGER = "|".join(
    [
        re.escape(KEY_BLOCK_START),
        r"://[^\s/?#'\"<>\\]*@",
        re.escape(KEY_BLOCK_END),
        r"(?i:wandb|w&b)[^\n]*[0-9a-f]{40}",
        r"[0-9a-f]{40}[^\n]{0,12}(?i:wandb|w&b)",
        r"(?i:aws)[^\n]*[A-Za-z0-9+/]{40}",
        r"(?i:basic)[ \t]",
        r"[A-Za-z0-9+/]{60}",
        r"(?m:^)[ \t]*[A-Za-z0-9+/]{12,}=",
        "(?:" + "|".join(map(re.escape, BASE64_PREFIXES)) + ")",
        r"(?:^|[^A-Za-z0-9]|\\[nrtbf]|\\u[0-9A-Fa-f]{4})(?:" + "|".join(map(re.escape, _LOWER_PREFIXES)) + ")",
        "(?:" + "|".join(map(re.escape, _UPPER_PREFIXES)) + ")",
        rf"(?i:{STRONG_WORDS}|{WEAK_WORDS})(?:[A-Z0-9_.\-][A-Za-z0-9_.\-]{{0,39}})?"
        r"(?:\\?[\"']?[ \t]{0,3}[:=]|[ \t]|%3[DdAa])",
    ]
)
