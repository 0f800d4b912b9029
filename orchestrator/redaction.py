"""Secret-looking text: find it, say what kind it is, and keep it out of everything orch prints or stores.

orch never needs to show a credential back: an error says what kind of thing it found and where (the
file, line and field), never the thing. ``find_secret`` names the kind of the first secret-looking value
in a text; ``redact`` replaces every one with ``<redacted: KIND>``; ``shown`` is how a user's value is
quoted in a message (redacted, and cut short when long). The CLI's error printer, the manifest errors,
the event log and the daemon's JSON logs all go through here.

The patterns are the published shapes of the credentials orch's users hold (cloud keys, tokens of the
services a training job talks to, private keys, passwords in URLs). They are heuristics: a random-looking
40-character base64 word is taken for an AWS secret access key. Pure ``re``, cheap to import.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

_B64 = "A-Za-z0-9/+"


@dataclass(frozen=True, slots=True)
class SecretMatch:
    kind: str     # what it looks like, written to follow "looks like": "an AWS access key id"
    start: int
    end: int


# (kind, pattern); the group named "s", when present, is the part that is secret (the rest is context).
# A pattern starts at a literal prefix or at a word's start (a lookbehind or \b), so a scan stays linear.
# A new pattern adds to _HINT_TEXT below a piece that its every match holds, in lower case.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key", re.compile(r"-----BEGIN[A-Z0-9 ]{0,40}-----")),
    ("an AWS access key id", re.compile(
        r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z0-9]{16}(?![A-Z0-9])")),
    # Distinctive prefixes need no word boundary: a token glued to other text ("xghp_...") is still one.
    ("a GitHub token", re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("a Hugging Face token", re.compile(r"hf_[A-Za-z0-9]{30,}")),
    ("a Slack token", re.compile(r"xox[abposre]-[0-9]{6,}-[A-Za-z0-9-]{6,}")),
    ("a Slack webhook URL", re.compile(r"hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,}")),
    ("a Google API key", re.compile(r"AIza[0-9A-Za-z_-]{35}")),
    ("a Google OAuth token", re.compile(r"ya29\.[0-9A-Za-z_-]{20,}")),
    ("an Azure client secret", re.compile(r"(?<![\w~.-])[\w.-]{3}\dQ~[\w~.-]{31,34}(?![\w~.-])")),
    ("an Azure storage key", re.compile(rf"(?<![{_B64}])[{_B64}]{{86}}==")),
    ("an API key", re.compile(r"\b(?:sk|rk)[-_](?:live[-_]|test[-_]|proj[-_])?(?P<s>[A-Za-z0-9_-]{20,})")),
    ("a RunPod API key", re.compile(r"\brpa_[A-Za-z0-9]{20,}")),
    ("a Lambda Cloud API key", re.compile(r"\bsecret_[A-Za-z0-9_-]{8,}_[0-9a-f]{16,}")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}(?:\.[A-Za-z0-9_-]*)?")),
    ("a bearer token", re.compile(
        r"(?i)\b(?:bearer|authorization:\s*(?:token|basic))\s+(?P<s>[A-Za-z0-9._~+/-]{12,}=*)")),
    ("a password in a URL", re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:(?P<s>[^/\s@]+)@")),
    ("a credential", re.compile(
        r"(?i)\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|account[_-]?key|"
        r"shared[_-]?access[_-]?key|client[_-]?secret|sig)\s*=\s*(?P<s>[^\s&;,'\"]{4,})")),
)
_AWS_SECRET = re.compile(rf"(?<![{_B64}=])[{_B64}]{{40}}(?![{_B64}=])")


_GENERATED = frozenset({"an API key"})


#: Some piece of text that every match of a pattern above holds, in lower case (a literal prefix, "==", "Q~",
#: "://", a credential's name and "="). Text holding none of them, and too short for a 40-character AWS
#: secret key, has no secret: one scan says so instead of one per pattern, and most text (names, numbers,
#: paths) is ruled out so. ASCII text is lowered once and scanned case-sensitively (much faster than
#: ``re.IGNORECASE``); other text is scanned ignoring case, which matches all that the lowered form would.
_HINT_TEXT = (
    r"-----begin|a(?:kia|sia|bia|cca|gpa|ida|ipa|npa|nva|pka|roa)|gh[pousr]_|github_pat_|hf_|xox|hooks\.slack\."
    r"|aiza|ya29\.|q~|==|[sr]k[-_]|rpa_|secret_|eyj|://|bearer|authorization"
    r"|(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|account[_-]?key|"
    r"shared[_-]?access[_-]?key|client[_-]?secret|sig)\s*=")
_HINT_LOWER = re.compile(_HINT_TEXT)
_HINT_ANY_CASE = re.compile(_HINT_TEXT, re.IGNORECASE)


def _may_hold_a_secret(text: str) -> bool:
    hint = _HINT_LOWER.search(text.lower()) if text.isascii() else _HINT_ANY_CASE.search(text)
    return hint is not None or (len(text) >= 40 and _AWS_SECRET.search(text) is not None)


def _mixed(word: str) -> bool:
    return any(c.islower() for c in word) and any(c.isupper() for c in word) and any(c.isdigit() for c in word)


def _char_class(c: str) -> int:
    return 0 if c.islower() else 1 if c.isupper() else 2 if c.isdigit() else 3


def _random_looking(word: str) -> bool:
    """A 40-character base64 word that reads like a generated key, not a path or a CamelCase name.

    Random base64 changes character class (lower/upper/digit/symbol) between neighbours about 25 times in
    40 characters (15 or more in 99.9% of keys); names and paths change far less, and paths have slashes.
    """
    if not _mixed(word):
        return False
    if word.count("/") > 2 or word.startswith("/") or word.endswith("/"):
        return False
    return sum(_char_class(a) != _char_class(b) for a, b in itertools.pairwise(word)) >= 15


def find_secrets(text: str) -> list[SecretMatch]:
    """Every secret-looking span of ``text``, in order, not overlapping."""
    return _scan(text) if _may_hold_a_secret(text) else []


def _scan(text: str) -> list[SecretMatch]:
    """``find_secrets`` without the quick look for a hint: every pattern run over all of ``text``."""
    found: list[SecretMatch] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            start, end = m.span("s") if "s" in pattern.groupindex else m.span()
            if kind in _GENERATED and not _mixed(text[start:end]):
                continue   # "sk-learn-experiment-one" is a name; keys mix cases and digits
            found.append(SecretMatch(kind, start, end))
    for m in _AWS_SECRET.finditer(text):
        if _random_looking(m.group()):
            found.append(SecretMatch("an AWS secret access key", m.start(), m.end()))
    found.sort(key=lambda s: (s.start, -s.end))
    merged: list[SecretMatch] = []
    for s in found:
        if merged and s.start < merged[-1].end:
            continue
        merged.append(s)
    return merged


def find_secret(text: str) -> str | None:
    """The kind of the first secret-looking value in ``text`` ("an AWS access key id"), or None."""
    found = find_secrets(text)
    return found[0].kind if found else None


def redact(text: str) -> str:
    """``text`` with every secret-looking value replaced by ``<redacted: KIND>``."""
    found = find_secrets(text)
    if not found:
        return text
    out: list[str] = []
    pos = 0
    for s in found:
        out.append(text[pos:s.start])
        out.append(f"<redacted: {s.kind}>")
        pos = s.end
    out.append(text[pos:])
    return "".join(out)


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def shown(value: object, limit: int = 60) -> str:
    """How a user's value appears in a message: quoted like ``repr``, never a secret, never huge."""
    text = value if isinstance(value, str) else repr(value)
    # Only the part shown can leak: look at it and a margin (no credential is longer), not a megabyte.
    kind = find_secret(text if len(text) <= limit else text[:limit + 256])
    if kind is not None:
        return f"<a value that looks like {kind}, not shown>"
    if len(text) > limit:
        return repr(text[:limit]) + f"... ({len(text)} characters)"
    return repr(value) if isinstance(value, str) else text


#: The longest region or zone name a cloud uses (GCP's ``northamerica-northeast1-a``): a longer "region" a
#: user wrote may be anything, a pasted credential included, and is shown only by its start and length.
REGION_SHOWN_CHARS = 25


def brief(value: str, limit: int = REGION_SHOWN_CHARS) -> str:
    """A config value that should be short (a region glob) as it may appear in a message: itself when it is
    at most ``limit`` characters and looks like no credential; else its first 3 characters and its length."""
    if len(value) <= limit and find_secret(value) is None and value.isprintable():
        return value
    return f"{value[:3] if value[:3].isalnum() else ''}...({len(value)} characters, not shown)"


#: C0 and C1 control characters but tab and newline, and DEL: ESC among them starts a terminal escape
#: sequence (a cloud's error text could move the cursor, retitle the window, or hide what follows).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character but tab and newline written as a visible ``\\xNN`` escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def safe_line(text: str, limit: int = 2000) -> str:
    """A message ready to print or store: secrets redacted, control characters escaped (no terminal escape
    sequence from a cloud's text reaches the terminal), at most ``limit`` characters per line."""
    return "\n".join(shorten(line, limit) for line in terminal_safe(redact(text)).split("\n"))
