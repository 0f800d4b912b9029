"""The SSH public key machines are launched with: given as the key itself or as the path of a .pub file
(``daemon.ssh_public_key`` / ``$ORCH_SSH_PUBLIC_KEY``), always checked to be an OpenSSH public key, so a
path (or anything else) is never sent to a cloud as if it were the key."""

from __future__ import annotations

import re
from pathlib import Path

KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
             "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")
_LINE = re.compile(r"(?P<type>[a-z0-9@.-]+) (?P<blob>[A-Za-z0-9+/]+={0,2})(?: [^\r\n]*)?", re.ASCII)
_MAX_FILE_BYTES = 16 * 1024


class PublicKeyError(ValueError):
    """Not an OpenSSH public key, or a file that cannot be read as one; the message names the source."""


def is_public_key(text: str) -> bool:
    """Whether ``text`` has the form of one OpenSSH public key line: ``<known type> <base64> [comment]``.
    (The form only: the blob is not decoded, the cloud or sshd judges the key itself.)"""
    m = _LINE.fullmatch(text.strip())
    return m is not None and m.group("type") in KEY_TYPES


def public_key(value: str, *, source: str) -> str:
    """The key ``value`` gives: itself when it is a key; else the path of a file holding one (``~`` expanded).
    Raises PublicKeyError naming ``source`` (never echoing a long value) when neither holds."""
    text = value.strip()
    if not text:
        return ""
    if is_public_key(text):
        return text
    if text.startswith(KEY_TYPES):
        raise PublicKeyError(f"{source}: not a valid OpenSSH public key (expected '<type> <base64> [comment]')")
    path = Path(text).expanduser()
    try:
        with path.open("rb") as f:
            raw = f.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise PublicKeyError(f"{source}: neither a public key nor a readable file ({exc.strerror or exc})") from None
    if len(raw) > _MAX_FILE_BYTES:
        raise PublicKeyError(f"{source}: {path} is too large for a public key file")
    content = raw.decode("utf-8", errors="replace").strip()
    if not is_public_key(content):
        raise PublicKeyError(f"{source}: {path} does not hold an OpenSSH public key (a .pub file: "
                             "'<type> <base64> [comment]'; never give the private key)")
    return content
