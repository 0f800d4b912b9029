"""Where the console listens and who may use it: a loopback address, or any address with a token.

A token is a shared secret of at least ``MIN_TOKEN_LENGTH`` printable ASCII characters (no spaces), given
with ``--token`` or ``$ORCH_CONSOLE_TOKEN``. It is kept out of ``repr`` and never logged.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

DEFAULT_BIND = "127.0.0.1:8470"
TOKEN_ENV = "ORCH_CONSOLE_TOKEN"
MIN_TOKEN_LENGTH = 16


class ConsoleConfigError(ValueError):
    """The console cannot start as asked; the message says what to change."""


@dataclass(frozen=True)
class ConsoleSettings:
    host: str
    port: int
    token: str | None = field(default=None, repr=False)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"


def is_loopback(host: str) -> bool:
    """Only this machine can reach ``host``: ``localhost``, 127.0.0.0/8 or ::1. Any other name or address,
    0.0.0.0 and :: included, may be reachable from elsewhere."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) or a bare ``PORT`` (on 127.0.0.1)."""
    text = text.strip()
    if text.isdigit():
        host, port_text = "127.0.0.1", text
    elif text.startswith("["):
        inner, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise ConsoleConfigError(f"bind address {text!r}: write an IPv6 address as [ADDR]:PORT")
        host = inner
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise ConsoleConfigError(f"bind address {text!r}: expected HOST:PORT, e.g. {DEFAULT_BIND}")
        if ":" in host:
            raise ConsoleConfigError(f"bind address {text!r}: write an IPv6 address as [ADDR]:PORT")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConsoleConfigError(f"bind address {text!r}: the port must be a number from 0 to 65535")
    return host, int(port_text)


def check_token(token: str) -> None:
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConsoleConfigError(f"the console token is too short: use at least {MIN_TOKEN_LENGTH} characters "
                                 "(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")
    if not all(33 <= ord(c) <= 126 for c in token):
        raise ConsoleConfigError("the console token must be printable ASCII without spaces (it travels in an "
                                 "HTTP header)")


def console_settings(bind: str, token: str | None, *, token_flag: str = "--token") -> ConsoleSettings:
    """Settings from ``--bind``/``--console`` and the token; refuses a non-loopback address without a token.
    ``token_flag`` names the command's token option in the message."""
    host, port = parse_bind(bind)
    token = token or None
    if token is not None:
        check_token(token)
    elif not is_loopback(host):
        raise ConsoleConfigError(f"the console would listen on {host}, which other machines may reach: set a token "
                                 f"(${TOKEN_ENV} or {token_flag}), or bind to 127.0.0.1")
    return ConsoleSettings(host, port, token)
