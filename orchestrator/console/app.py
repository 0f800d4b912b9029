"""The console as a WSGI application: routing, authentication, the two actions, security headers.

Routes (GET unless marked)::

    /                      the fleet (auto-refreshes)
    /spend?range=24h|7d|30d
    /budgets
    /events?job=&kind=&since=&until=&page=
    /jobs/NAME             the job: timeline, attempts, checkpoints, events
    /jobs/NAME/stop        confirm; POST: mark for teardown (what `orch down` writes)
    /jobs/NAME/relaunch    confirm; POST: ask the engine to relaunch now
    /login                 the token form; POST: set the session cookie     /logout (POST)
    /static/console.css

Who may do what is ``auth.Guard``'s; every response carries a Content-Security-Policy that allows no script.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from orchestrator.clock import utcnow
from orchestrator.console import views
from orchestrator.console.auth import CSRF_FIELD, Guard, Verdict, same_origin, session_cookie_header
from orchestrator.money.budgets import Budget
from orchestrator.store.db import Store
from orchestrator.store.requests import RequestRefusedError, request_relaunch, request_stop
from orchestrator.store.row_errors import NotFoundError

log = logging.getLogger("orch.console")

STATIC = Path(__file__).resolve().parent / "static"
MAX_FORM_BYTES = 8192
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
                                "frame-ancestors 'none'; base-uri 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),   # not no-referrer: browsers then send "Origin: null" with POSTs
)

StartResponse = Callable[..., Any]


class _Response:
    def __init__(self, status: int, body: bytes, content_type: str = "text/html; charset=utf-8",
                 headers: Iterable[tuple[str, str]] = ()) -> None:
        self.status = status
        self.body = body
        self.headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers]

    @classmethod
    def page(cls, page: views.Page, headers: Iterable[tuple[str, str]] = ()) -> _Response:
        return cls(page.status, page.html.encode(), headers=[("Cache-Control", "no-store"), *headers])

    @classmethod
    def redirect(cls, location: str, headers: Iterable[tuple[str, str]] = ()) -> _Response:
        return cls(HTTPStatus.SEE_OTHER, b"", "text/plain; charset=utf-8", [("Location", location), *headers])


def _path(environ: Mapping[str, Any]) -> str:
    # WSGI hands the path over as latin-1-decoded bytes (PEP 3333); the URL's bytes are UTF-8.
    raw = str(environ.get("PATH_INFO") or "/")
    try:
        return raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return raw


def _local_path(text: str | None) -> str:
    """A same-site path to go back to after logging in (anything else: the fleet)."""
    # Browsers drop tabs and newlines inside URLs ("/\t/evil.example" becomes "//evil.example"): refuse any
    # control character or space, as well as "//" and backslashes.
    if (not text or not text.startswith("/") or text.startswith("//") or "\\" in text
            or any(ord(c) <= 32 or ord(c) == 127 for c in text)):
        return "/"
    parts = urlsplit(text)
    return parts.path + (f"?{parts.query}" if parts.query else "") if not parts.netloc else "/"


class ConsoleApp:
    """``ConsoleApp(store, guard)`` is a WSGI callable. ``clock`` gives the pages' "now" (tests fix it)."""

    def __init__(self, store: Store, guard: Guard, *, clock: Callable[[], datetime] = utcnow,
                 budgets: Sequence[Budget] = ()) -> None:
        self.store = store
        self.guard = guard
        self.clock = clock
        self.budgets = tuple(budgets)       # orch's config budgets: (orchestrator/money/budgets.py)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            response = self._respond(environ)
        except Exception:
            log.exception("console request failed", extra={"fields": {"path": _path(environ)}})
            response = _Response.page(views.message(self._chrome(), 500, "Something went wrong",
                                                    "The console could not answer; the daemon's log has the details."))
        start_response(f"{response.status} {HTTPStatus(response.status).phrase}",
                       [*response.headers, *SECURITY_HEADERS])
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [response.body]

    def _chrome(self) -> views.Chrome:
        return views.Chrome(self.clock(), self.guard.csrf_token(), self.guard.token_required)

    # -- dispatch ----------------------------------------------------------------------------------------
    def _respond(self, environ: Mapping[str, Any]) -> _Response:
        method = str(environ.get("REQUEST_METHOD") or "GET").upper()
        path = _path(environ)
        chrome = self._chrome()
        if not self.guard.host_allowed(environ):
            return _Response.page(views.message(chrome, 403, "Unknown host", "This console answers to a loopback "
                                                "address only (127.0.0.1, localhost)."))
        if path == "/static/console.css" and method in ("GET", "HEAD"):
            return _Response(200, (STATIC / "console.css").read_bytes(), "text/css; charset=utf-8",
                             [("Cache-Control", "max-age=300")])
        if path == "/login":
            return self._login(environ, method, chrome)
        verdict = self.guard.verdict(environ)
        if verdict in (Verdict.MISSING, Verdict.WRONG):
            return self._refuse(environ, method, path, verdict, chrome)
        if method == "POST":
            return self._post(environ, path, verdict, chrome)
        if method not in ("GET", "HEAD"):
            return _Response.page(views.message(chrome, 405, "Method not allowed", f"{method} is not used here."),
                                  [("Allow", "GET, HEAD, POST")])
        return self._get(environ, path, chrome)

    def _get(self, environ: Mapping[str, Any], path: str, chrome: views.Chrome) -> _Response:
        args = parse_qs(str(environ.get("QUERY_STRING") or ""), max_num_fields=50)
        if path == "/":
            return _Response.page(views.fleet_page(self.store, chrome))
        if path == "/spend":
            return _Response.page(views.spend_page(self.store, chrome, (args.get("range") or [None])[0]))
        if path == "/budgets":
            return _Response.page(views.budgets_page(self.store, chrome, self.budgets))
        if path == "/events":
            return _Response.page(views.events_page(self.store, chrome, args))
        job, action = _job_route(path)
        if job is not None and action is None:
            return _Response.page(views.job_page(self.store, chrome, job, done=(args.get("done") or [None])[0]))
        if job is not None and action in ("stop", "relaunch"):
            return _Response.page(views.confirm_page(self.store, chrome, job, action))
        return _Response.page(views.not_found(chrome, f"nothing at {path}"))

    # -- actions -----------------------------------------------------------------------------------------
    def _post(self, environ: Mapping[str, Any], path: str, verdict: Verdict, chrome: views.Chrome) -> _Response:
        form = _form(environ)
        if form is None:
            return _Response.page(views.message(chrome, 413, "Too large", "That form is larger than the console "
                                                "accepts."))
        if not self.guard.post_allowed(environ, form.get(CSRF_FIELD), verdict):
            return _Response.page(views.message(chrome, 403, "Refused", "This form did not come from this console "
                                                "(origin or CSRF token missing or wrong): reload the page and try "
                                                "again."))
        if path == "/logout":
            return _Response.redirect("/login", [("Set-Cookie", session_cookie_header("", secure=_https(environ),
                                                                                        clear=True))])
        job, action = _job_route(path)
        if job is None or action not in ("stop", "relaunch"):
            return _Response.page(views.not_found(chrome, f"no action at {path}"))
        try:
            with self.store.transaction() as tx:
                if action == "stop":
                    request_stop(tx, job, by="console", now=chrome.now)
                else:
                    request_relaunch(tx, job, by="console", now=chrome.now)
        except NotFoundError:
            return _Response.page(views.not_found(chrome, f"no job named {job!r}"))
        except RequestRefusedError as exc:
            return _Response.page(views.job_page(self.store, chrome, job, error=str(exc), status=409))
        log.info("console action", extra={"fields": {"action": action, "job": job}})
        return _Response.redirect(f"/jobs/{quote(job, safe='')}?done={action}")

    # -- authentication ------------------------------------------------------------------------------------
    def _refuse(self, environ: Mapping[str, Any], method: str, path: str, verdict: Verdict,
                chrome: views.Chrome) -> _Response:
        status = 401 if verdict is Verdict.MISSING else 403
        problem = None if verdict is Verdict.MISSING else "That token is not this console's."
        query = str(environ.get("QUERY_STRING") or "")
        back = path + (f"?{query}" if query and method == "GET" else "")
        headers = [("WWW-Authenticate", 'Bearer realm="orch console"')] if status == 401 else []
        return _Response.page(views.login_page(chrome, status=status, problem=problem, next_path=_local_path(back)),
                              headers)

    def _login(self, environ: Mapping[str, Any], method: str, chrome: views.Chrome) -> _Response:
        args = parse_qs(str(environ.get("QUERY_STRING") or ""), max_num_fields=10)
        if not self.guard.token_required:
            return _Response.redirect("/")
        if method != "POST":
            return _Response.page(views.login_page(chrome, status=200, problem=None,
                                                   next_path=_local_path((args.get("next") or [None])[0])))
        form = _form(environ)
        if form is None or not same_origin(environ):
            return _Response.page(views.login_page(chrome, status=403, problem="Log in from this console's own page.",
                                                   next_path="/"))
        next_path = _local_path(form.get("next"))
        if not self.guard.token_matches(form.get("token") or ""):
            log.info("console login refused")
            return _Response.page(views.login_page(chrome, status=403, problem="That token is not this console's.",
                                                   next_path=next_path))
        cookie = session_cookie_header(self.guard.session_value(), secure=_https(environ))
        return _Response.redirect(next_path, [("Set-Cookie", cookie)])


def _https(environ: Mapping[str, Any]) -> bool:
    return environ.get("wsgi.url_scheme") == "https" or environ.get("HTTP_X_FORWARDED_PROTO") == "https"


def _job_route(path: str) -> tuple[str | None, str | None]:
    """``/jobs/NAME`` -> (NAME, None); ``/jobs/NAME/ACTION`` -> (NAME, ACTION); else (None, None)."""
    if not path.startswith("/jobs/"):
        return None, None
    rest = path[len("/jobs/"):]
    name, _, action = rest.partition("/")
    if not name or "/" in action:
        return None, None
    return name, action or None


def _form(environ: Mapping[str, Any]) -> dict[str, str] | None:
    """A urlencoded POST body as field -> first value; None when larger than MAX_FORM_BYTES."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_FORM_BYTES:
        return None
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=20)
    return {k: v[0] for k, v in fields.items() if v}
