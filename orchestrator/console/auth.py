"""Who may use the console, and which POSTs are the console's own.

* With a token (required off loopback): a request carries it as ``Authorization: Bearer <token>``, or the
  session cookie the login form sets (an HMAC of the token, not the token: HttpOnly, SameSite=Strict). No
  credentials: 401; wrong ones: 403. Comparisons are constant-time (``hmac.compare_digest``).
* Without a token (loopback only): the Host header must name a loopback host, so a page on another site
  that rebinds its DNS name to 127.0.0.1 cannot read the console.
* Every POST made from a page (cookie or no token) must come from the console's own origin (Origin, else
  Referer, equal to the Host) and carry the form's CSRF token; a Bearer request needs neither (a browser
  never adds that header by itself).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from enum import StrEnum
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import urlsplit

from orchestrator.console.settings import is_loopback

SESSION_COOKIE = "orch_console"
CSRF_FIELD = "csrf"


class Verdict(StrEnum):
    ALLOWED = "allowed"
    BEARER = "bearer"      # allowed, by an Authorization header (no CSRF check needed)
    MISSING = "missing"    # no credentials: 401
    WRONG = "wrong"        # credentials that do not match: 403


def _mac(key: bytes, label: str) -> str:
    return hmac.new(key, label.encode(), hashlib.sha256).hexdigest()


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


class Guard:
    """Checks requests against the token (if any) and this process's CSRF secret."""

    def __init__(self, token: str | None, *, secret: bytes | None = None) -> None:
        self._token = token or None
        self._secret = secret or secrets.token_bytes(32)

    def __repr__(self) -> str:   # never the token
        return f"Guard(token={'set' if self._token else 'none'})"

    @property
    def token_required(self) -> bool:
        return self._token is not None

    def session_value(self) -> str:
        """The session cookie's value: derived from the token, so the browser never stores the token itself."""
        if self._token is None:
            raise RuntimeError("no token: the console has no sessions")
        return _mac(self._token.encode(), "orch-console-session-v1")

    def csrf_token(self) -> str:
        return _mac(self._secret, "orch-console-csrf-v1")

    def token_matches(self, candidate: str) -> bool:
        return self._token is not None and _same(candidate, self._token)

    def verdict(self, environ: Mapping[str, Any]) -> Verdict:
        if self._token is None:
            return Verdict.ALLOWED
        header = str(environ.get("HTTP_AUTHORIZATION") or "")
        if header:
            scheme, _, value = header.partition(" ")
            if scheme.lower() == "bearer" and self.token_matches(value.strip()):
                return Verdict.BEARER
            return Verdict.WRONG
        cookie = session_cookie(environ)
        if cookie is None:
            return Verdict.MISSING
        return Verdict.ALLOWED if _same(cookie, self.session_value()) else Verdict.WRONG

    def host_allowed(self, environ: Mapping[str, Any]) -> bool:
        """With a token any Host will do; without one, only a loopback Host (see the module's docstring)."""
        if self._token is not None:
            return True
        host = urlsplit("//" + str(environ.get("HTTP_HOST") or "")).hostname
        return host is not None and is_loopback(host)

    def post_allowed(self, environ: Mapping[str, Any], form_csrf: str | None, verdict: Verdict) -> bool:
        """A POST from the console's own page (same origin and its CSRF token), or a Bearer request."""
        if verdict is Verdict.BEARER:
            return True
        return same_origin(environ) and form_csrf is not None and _same(form_csrf, self.csrf_token())


def session_cookie(environ: Mapping[str, Any]) -> str | None:
    raw = str(environ.get("HTTP_COOKIE") or "")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except CookieError:
        return None
    morsel = jar.get(SESSION_COOKIE)
    return morsel.value if morsel is not None else None


def same_origin(environ: Mapping[str, Any]) -> bool:
    """The request's Origin (else its Referer) names the host it was sent to."""
    host = str(environ.get("HTTP_HOST") or "").lower()
    source = str(environ.get("HTTP_ORIGIN") or environ.get("HTTP_REFERER") or "")
    if not host or not source or source == "null":
        return False
    return urlsplit(source).netloc.lower() == host


def session_cookie_header(value: str, *, secure: bool, clear: bool = False) -> str:
    """The Set-Cookie value: HttpOnly, SameSite=Strict, the whole console's path; Secure behind HTTPS."""
    parts = [f"{SESSION_COOKIE}={'' if clear else value}", "Path=/", "HttpOnly", "SameSite=Strict"]
    if clear:
        parts.append("Max-Age=0")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)
