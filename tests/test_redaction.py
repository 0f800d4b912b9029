"""orchestrator.redaction: what looks like a credential is named, never shown; ordinary text passes.

The fake credentials below are made up for these tests (the shapes are the providers' published ones).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import redaction
from orchestrator.redaction import find_secret, redact, safe_line, shown

SECRETS = {
    "an AWS access key id": "ASIAZ3TESTKEYQ6H7J2K",
    "an AWS secret access key": "Zq8/mT3kLw9+Rb2xYc7Vn4Hd1Gf6Js0PaE5uIoK3",
    "a GitHub token": "gho_9f8E7d6C5b4A3z2Y1x0W9v8U7t6S5r4Q3p2O",
    "a Hugging Face token": "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210",
    "a Slack token": "xoxp-55512345678-55587654321-TestSlackTok",
    "a private key": "-----BEGIN EC PRIVATE KEY-----",
    "a Google API key": "AIzaTestKey_0123456789abcdefghijklmnopq",
    "an Azure client secret": "Xy98Q~abcdefghijklmnopqrstuvwxyz01234_",
    "a JSON web token": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0.c2ln",
    "an API key": "sk-proj-Q1w2E3r4T5y6U7i8O9p0AsDf",
}


@pytest.mark.parametrize(("kind", "value"), sorted(SECRETS.items()))
def test_each_kind_is_named_and_never_shown(kind: str, value: str) -> None:
    text = f"launch failed: got {value} from the config"
    assert find_secret(text) == kind
    out = redact(text)
    assert value not in out and f"<redacted: {kind}>" in out
    assert out.startswith("launch failed: got ") and out.endswith(" from the config")
    assert value not in shown(value) and kind in shown(value)


@pytest.mark.parametrize(("text", "secret"), [
    ("rclone remote s3://ops:TopS3cretPw@minio.lan/bucket", "TopS3cretPw"),
    ("DefaultEndpointsProtocol=https;AccountName=x;AccountKey=QmFzZTY0S2V5PT0;", "QmFzZTY0S2V5PT0"),
    ("curl -H 'Authorization: token 0a1b2c3d4e5f6a7b8c9d'", "0a1b2c3d4e5f6a7b8c9d"),
    ("https://acct.blob.core.windows.net/c?sv=2022&sig=AbCdEf0123%2Bxyz", "AbCdEf0123%2Bxyz"),
    ("region glob 'eu-xoxp-55512345678-55587654321-TestSlackTok*'", "55587654321-TestSlackTok"),
    ("key_ghp_9f8E7d6C5b4A3z2Y1x0W9v8U7t6S5r4Q3p2O_end", "9f8E7d6C5b4A3z2Y1x0W9v8U7t6S5r4Q3p2O"),
])
def test_credentials_inside_urls_and_headers_keep_their_context(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert "<redacted:" in out


@pytest.mark.parametrize("benign", [
    "s3://my-bucket/llama/ckpt-000100",
    "MyBucket/Experiments/Run1/Checkpoints123",   # 40 characters of base64's alphabet, but a path
    "ThisIsMyVeryLongCamelCaseName1234567890",
    "sk-learn-experiment-number-one",             # "sk-" then a name, not a key
    "sha256:" + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "i-0123456789abcdef0 in us-east-1a, launch orch-alice-l0123456789ab",
    "secret HF_TOKEN is not set in the launch environment",
    "python train.py --lr 1e-4 --token-budget 4096",
    "nvcr.io/nvidia/pytorch:24.05-py3",
])
def test_ordinary_text_is_left_alone(benign: str) -> None:
    assert find_secret(benign) is None
    assert redact(benign) == benign


def test_shown_cuts_long_values_and_keeps_short_ones_as_repr() -> None:
    assert shown("A100") == "'A100'"
    assert shown(2.5) == "2.5"
    long = shown("Q" * 100_000)
    assert len(long) < 100 and "100000 characters" in long


def test_safe_line_bounds_every_line() -> None:
    text = safe_line("x" * 50_000 + "\nsecond " + SECRETS["a GitHub token"], 300)
    first, second = text.split("\n")
    assert len(first) < 350 and second == "second <redacted: a GitHub token>"



# Pieces of every kind, cut and cased every way: the quick look for a hint must never skip a text the full
# scan would find a secret in (nor change what it finds).
_PIECES = [*SECRETS.values(), "s3://ops:TopS3cretPw@minio.lan/b", "AccountKey=QmFzZTY0S2V5PT0;",
           "Authorization: basic 0a1b2c3d4e5f6a7b8c9d", "Bearer 0a1b2c3d4e5f6a7b8c9d", "ya29.abcdefghijklmnopqrstuv",
           "hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXX", "rpa_ABCDEFGHIJKLMNOPQRSTUV",
           "secret_abcdefgh_0123456789abcdef", "PassWord = hunter22", "sig=AbCd", "\u017fecret=abcd1234",
           "to\u212aen=abcd1234", "A" * 86 + "==", "github_pat_" + "a1" * 16, "AKIAABCDEFGHIJKLMNOP"]


def _variants(piece: str) -> list[str]:
    cuts = [piece[:i] for i in range(len(piece) + 1)] + [piece[i:] for i in range(len(piece))]
    return [t for c in cuts for t in (c, c.swapcase(), f"x {c} y", f"{c.swapcase()}=é")]


@pytest.mark.parametrize("piece", _PIECES)
def test_the_quick_look_finds_what_the_full_scan_finds(piece: str) -> None:
    variants = _variants(piece)
    assert any(redaction._scan(t) for t in variants)   # the piece is a secret: the scan finds it
    for text in variants:
        assert redaction.find_secrets(text) == redaction._scan(text), text


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([*_PIECES, " ", "\n", "=", "-", "_", "/"]), st.integers(0, 90),
                          st.booleans()), max_size=5))
def test_the_quick_look_finds_what_the_full_scan_finds_in_mixtures(parts: list[tuple[str, int, bool]]) -> None:
    text = "".join(p[:cut].swapcase() if flip else p[:cut] for p, cut, flip in parts)
    assert redaction.find_secrets(text) == redaction._scan(text)
