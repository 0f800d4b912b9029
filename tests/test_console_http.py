"""The web console without a browser: binding rules, the token (header, login form, cookie), CSRF and origin
checks on the two actions, escaping, security headers, and the pages' content, through the WSGI app and (for
the non-loopback bind) a real server on 0.0.0.0 reached at 127.0.0.1."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote, urlencode

import httpx
import pytest

from orchestrator.console.app import ConsoleApp
from orchestrator.console.auth import SESSION_COOKIE, Guard
from orchestrator.console.server import start_console
from orchestrator.console.settings import (
    ConsoleConfigError,
    ConsoleSettings,
    console_settings,
    is_loopback,
    parse_bind,
)
from orchestrator.engine.events import EventKind
from orchestrator.engine.states import DesiredState
from orchestrator.store import repo
from orchestrator.store.db import Store, open_store
from orchestrator.store.requests import take_relaunch_requests
from providers.base import InstanceState
from tests.support import console_world
from tests.support.manifests import store_unchecked_job

TOKEN = "s3cret-console-token-0123456789"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOST = "127.0.0.1:8470"
ORIGIN = f"http://{HOST}"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    console_world.fill(s, NOW)
    try:
        yield s
    finally:
        s.close()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    cookies: list[str]
    body: str


def call(
    app: ConsoleApp,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    form: dict[str, str] | None = None,
    host: str = HOST,
) -> Reply:
    """One request through the WSGI app, as wsgiref would hand it over."""
    path, _, query = path.partition("?")
    body = urlencode(form or {}).encode()
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": unquote(path).encode().decode("latin-1"),
        "QUERY_STRING": query,
        "HTTP_HOST": host,
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/x-www-form-urlencoded",
        "wsgi.url_scheme": "http",
    }
    for name, value in (headers or {}).items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    seen: dict[str, object] = {}

    def start_response(status: str, hdrs: list[tuple[str, str]]) -> None:
        seen["status"], seen["headers"] = status, hdrs

    out = b"".join(app(environ, start_response))
    hdrs: list[tuple[str, str]] = seen["headers"]  # type: ignore[assignment]
    return Reply(
        int(str(seen["status"]).split()[0]),
        {k.lower(): v for k, v in hdrs},
        [v for k, v in hdrs if k.lower() == "set-cookie"],
        out.decode(),
    )


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)


# -- where it listens ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("console.example.com", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_bind_addresses_parse_and_off_loopback_needs_a_long_token() -> None:
    assert parse_bind("127.0.0.1:8470") == ("127.0.0.1", 8470)
    assert parse_bind("[::1]:9000") == ("::1", 9000)
    assert parse_bind("8471") == ("127.0.0.1", 8471)
    for bad in ("localhost", "::1:80", "127.0.0.1:99999", ":80"):
        with pytest.raises(ConsoleConfigError):
            parse_bind(bad)
    with pytest.raises(ConsoleConfigError, match="set a token"):
        console_settings("0.0.0.0:8470", None)
    with pytest.raises(ConsoleConfigError, match="too short"):
        console_settings("0.0.0.0:8470", "short")
    with pytest.raises(ConsoleConfigError, match="printable ASCII"):
        console_settings("0.0.0.0:8470", "a token with spaces in it")
    settings = console_settings("0.0.0.0:8470", TOKEN)
    assert TOKEN not in repr(settings) and not settings.loopback
    assert console_settings("127.0.0.1:8470", None).token is None


# -- loopback without a token --------------------------------------------------------------------------


def test_pages_render_with_their_content(store: Store) -> None:
    app = ConsoleApp(store, Guard(None), clock=lambda: NOW)
    fleet = call(app, "GET", "/")
    assert fleet.status == 200 and 'http-equiv="refresh"' in fleet.body
    assert 'data-job="llama-ft"' in fleet.body and "$2.05/h" in fleet.body and "$24.10/h" in fleet.body
    assert 'class="spark"' in fleet.body
    spend = call(app, "GET", "/spend?range=24h")
    assert spend.status == 200 and spend.body.count('class="bar ') >= 10 and "bert-pretrain" in spend.body
    assert "Per provider" in spend.body and ">lambda<" in spend.body
    budgets = call(app, "GET", "/budgets")
    assert budgets.status == 200 and "job lifetime" in budgets.body and "$60.00" in budgets.body
    assert "lvl-near" in budgets.body  # eval-sweep: $4.23 of $5.00
    job = call(app, "GET", "/jobs/llama-ft")
    assert job.status == 200 and "tl-relaunch" in job.body and "tl-preemption" in job.body
    assert job.body.count("tl-checkpoint") >= 3
    assert "1x A100-80G · spot</dd>" in job.body      # what the manifest asks for: its market's text
    assert call(app, "GET", "/jobs/nope").status == 404
    assert call(app, "GET", "/nowhere").status == 404
    css = call(app, "GET", "/static/console.css")
    assert css.status == 200 and css.headers["content-type"].startswith("text/css")


def test_event_filters_and_paging(store: Store) -> None:
    app = ConsoleApp(store, Guard(None), clock=lambda: NOW)
    page = call(app, "GET", "/events?job=llama-ft&kind=preempted")
    assert page.status == 200 and "1 matching" in page.body and "Server.SpotInstanceTermination" in page.body
    with store.transaction() as tx:  # more than one page (50 a page)
        for i in range(60):
            repo.record_event(tx, EventKind.APPLY, f"padding {i}", ts=NOW - timedelta(days=2, minutes=i))
    first = call(app, "GET", "/events")
    assert "page 1 of" in first.body and 'rel="next"' in first.body
    last = call(app, "GET", "/events?page=999")
    assert 'rel="next"' not in last.body and 'rel="prev"' in last.body
    window = call(
        app,
        "GET",
        "/events?since="
        + (NOW - timedelta(hours=2, minutes=59)).strftime("%Y-%m-%d %H:%M")
        + "&until="
        + (NOW - timedelta(hours=2, minutes=50)).strftime("%Y-%m-%d %H:%M"),
    )
    assert "job running on gcp orch-llama-ft-7f3a" in window.body and "p4de" not in window.body
    bad = call(app, "GET", "/events?since=yesterday")
    assert bad.status == 200 and "since: not a date and time" in bad.body


def test_every_response_carries_the_security_headers(store: Store) -> None:
    app = ConsoleApp(store, Guard(None), clock=lambda: NOW)
    for path in ("/", "/jobs/llama-ft", "/nowhere"):
        reply = call(app, "GET", path)
        csp = reply.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "script" not in csp
        assert reply.headers["x-frame-options"] == "DENY" and reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "same-origin"


def test_without_a_token_only_a_loopback_host_header_is_served(store: Store) -> None:
    """A page on another site that rebinds its name to 127.0.0.1 must not read the console."""
    app = ConsoleApp(store, Guard(None), clock=lambda: NOW)
    assert call(app, "GET", "/", host="evil.example:8470").status == 403
    assert call(app, "GET", "/", host="localhost:8470").status == 200
    assert call(app, "GET", "/", host="[::1]:8470").status == 200


def test_stop_needs_the_consoles_own_origin_and_csrf_token(store: Store) -> None:
    app = ConsoleApp(store, Guard(None), clock=lambda: NOW)
    confirm = call(app, "GET", "/jobs/llama-ft/stop")
    assert confirm.status == 200 and "Stop llama-ft?" in confirm.body
    token = csrf_of(confirm.body)
    refused = [
        call(app, "POST", "/jobs/llama-ft/stop", form={}, headers={"Origin": ORIGIN}),
        call(app, "POST", "/jobs/llama-ft/stop", form={"csrf": "0" * 64}, headers={"Origin": ORIGIN}),
        call(app, "POST", "/jobs/llama-ft/stop", form={"csrf": token}),  # no origin
        call(app, "POST", "/jobs/llama-ft/stop", form={"csrf": token}, headers={"Origin": "http://evil.example"}),
        call(app, "POST", "/jobs/llama-ft/stop", form={"csrf": token}, headers={"Origin": "null"}),
    ]
    assert [r.status for r in refused] == [403] * 5
    with store.transaction() as tx:
        job = repo.get_job(tx, "llama-ft")
        assert job is not None and job.desired_state == DesiredState.ACTIVE.value
    done = call(app, "POST", "/jobs/llama-ft/stop", form={"csrf": token}, headers={"Referer": ORIGIN + "/jobs/x"})
    assert done.status == 303 and done.headers["location"] == "/jobs/llama-ft?done=stop"
    with store.transaction() as tx:
        job = repo.get_job(tx, "llama-ft")
        assert job is not None and job.desired_state == DesiredState.DELETED.value
    page = call(app, "GET", done.headers["location"])
    assert "Marked for teardown" in page.body and "Relaunch now" not in page.body


def test_relaunch_request_reaches_the_engines_queue(store: Store) -> None:
    app = ConsoleApp(store, Guard(None), clock=lambda: NOW)
    token = csrf_of(call(app, "GET", "/jobs/llama-ft/relaunch").body)
    done = call(app, "POST", "/jobs/llama-ft/relaunch", form={"csrf": token}, headers={"Origin": ORIGIN})
    assert done.status == 303
    assert "waiting for the engine" in call(app, "GET", "/jobs/llama-ft").body
    with store.transaction() as tx:
        taken = take_relaunch_requests(tx, now=NOW)
    assert [(r.job_name, r.requested_by) for r in taken] == [("llama-ft", "console")]
    with store.transaction() as tx:
        repo.set_desired_state(tx, "eval-sweep", DesiredState.PRUNED, now=NOW)
    refused = call(app, "POST", "/jobs/eval-sweep/relaunch", form={"csrf": token}, headers={"Origin": ORIGIN})
    assert refused.status == 409 and "apply its manifest again" in refused.body
    assert call(app, "POST", "/jobs/nope/stop", form={"csrf": token}, headers={"Origin": ORIGIN}).status == 404


# -- with a token --------------------------------------------------------------------------------------


def test_a_token_is_needed_for_every_page_and_checked_exactly(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="orch")
    app = ConsoleApp(store, Guard(TOKEN), clock=lambda: NOW)
    missing = call(app, "GET", "/jobs/llama-ft")
    assert missing.status == 401 and "bearer" in missing.headers["www-authenticate"].lower()
    assert 'name="token"' in missing.body and "llama-ft" not in missing.body.replace('value="/jobs/llama-ft"', "")
    assert call(app, "GET", "/", headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"}).status == 403
    assert call(app, "GET", "/", headers={"Authorization": "Basic " + TOKEN}).status == 403
    assert call(app, "GET", "/", headers={"Authorization": "Bearer " + TOKEN}).status == 200
    # The stylesheet is served to the login page; nothing else is.
    assert call(app, "GET", "/static/console.css").status == 200
    assert call(app, "POST", "/jobs/llama-ft/stop", form={}).status == 401
    # A Bearer request needs no CSRF token: a browser never adds that header by itself.
    stopped = call(app, "POST", "/jobs/ablation-7/stop", headers={"Authorization": "Bearer " + TOKEN})
    assert stopped.status == 303


def test_the_login_form_sets_an_httponly_strict_cookie_that_is_not_the_token(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="orch")
    app = ConsoleApp(store, Guard(TOKEN), clock=lambda: NOW)
    wrong = call(
        app, "POST", "/login", form={"token": "not-the-token-at-all", "next": "/budgets"}, headers={"Origin": ORIGIN}
    )
    assert wrong.status == 403 and not wrong.cookies
    cross = call(app, "POST", "/login", form={"token": TOKEN}, headers={"Origin": "http://evil.example"})
    assert cross.status == 403 and not cross.cookies
    ok = call(app, "POST", "/login", form={"token": TOKEN, "next": "/budgets"}, headers={"Origin": ORIGIN})
    assert ok.status == 303 and ok.headers["location"] == "/budgets"
    [cookie] = ok.cookies
    assert cookie.startswith(SESSION_COOKIE + "=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    assert value and TOKEN not in cookie
    page = call(app, "GET", "/budgets", headers={"Cookie": f"{SESSION_COOKIE}={value}"})
    assert page.status == 200 and "Log out" in page.body
    assert call(app, "GET", "/", headers={"Cookie": f"{SESSION_COOKIE}={value[:-1]}0"}).status == 403
    # An open redirect is not possible through ?next=.
    for target in ("//evil.example/x", "/\t/evil.example", "/\\evil.example", "https://evil.example/"):
        away = call(app, "POST", "/login", form={"token": TOKEN, "next": target}, headers={"Origin": ORIGIN})
        assert away.headers["location"] == "/", target
    # With the cookie, actions still need the page's CSRF token and origin.
    jar = {"Cookie": f"{SESSION_COOKIE}={value}"}
    csrf = csrf_of(call(app, "GET", "/jobs/llama-ft/stop", headers=jar).body)
    same_site = {**jar, "Origin": ORIGIN}
    assert call(app, "POST", "/jobs/llama-ft/stop", form={}, headers=same_site).status == 403
    assert call(app, "POST", "/jobs/llama-ft/stop", form={"csrf": csrf}, headers=same_site).status == 303
    logout = call(app, "POST", "/logout", form={"csrf": csrf}, headers={**jar, "Origin": ORIGIN})
    assert logout.status == 303 and "Max-Age=0" in logout.cookies[0]
    assert TOKEN not in caplog.text and value not in caplog.text


def test_pages_escape_names_and_messages(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    try:
        evil = "<img src=x onerror=alert(1)>"  # the store takes any name; manifests would not
        with store.transaction() as tx:
            job = store_unchecked_job(tx, evil, {"name": evil, "policies": {"budget_usd": 3}}, "h", now=NOW)
            assert job.id is not None
            a = repo.create_attempt(tx, job.id, "L1", generation=1, now=NOW)
            repo.record_instance(
                tx,
                repo.InstanceRecord(
                    provider='"><svg onload=alert(2)>',
                    launch_id="L1",
                    owner="t",
                    job_id=job.id,
                    instance_id="i-1",
                    state=InstanceState.RUNNING,
                ),
                now=NOW,
            )
            repo.record_spend(tx, job.id, NOW - timedelta(hours=1), NOW, 1.0, attempt_id=a.id)
            repo.record_event(tx, EventKind.APPLY, "<script>alert(3)</script>", job_id=job.id, ts=NOW)
        app = ConsoleApp(store, Guard(None), clock=lambda: NOW)
        quoted = "/jobs/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"
        pages = {p: call(app, "GET", p) for p in ("/", "/spend?range=24h", "/budgets", "/events", quoted)}
        assert {r.status for r in pages.values()} == {200}
        for reply in pages.values():
            assert "<script>alert" not in reply.body and "<img src=x" not in reply.body
            assert "<svg onload" not in reply.body
        assert "&lt;script&gt;alert(3)&lt;/script&gt;" in pages["/events"].body
        assert "&lt;img src=x onerror=alert(1)&gt;" in pages["/"].body and quoted in pages["/"].body
        assert 'data-series="&lt;img src=x onerror=alert(1)&gt;"' in pages["/spend?range=24h"].body
        assert (
            "&#34;&gt;&lt;svg onload=alert(2)&gt;" in pages[quoted].body
            or "&quot;&gt;&lt;svg onload=alert(2)&gt;" in pages[quoted].body
        )
    finally:
        store.close()


# -- a real server off loopback ------------------------------------------------------------------------


def test_a_server_on_every_interface_refuses_requests_without_the_token(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="orch")
    with pytest.raises(ConsoleConfigError):
        start_console(store, ConsoleSettings("0.0.0.0", 0, None))  # settings made by hand: still refused
    console = start_console(store, console_settings("0.0.0.0:0", TOKEN))
    try:
        base = f"http://127.0.0.1:{console.port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            assert client.get("/").status_code == 401
            assert client.get("/jobs/llama-ft").status_code == 401
            assert client.post("/jobs/llama-ft/stop", data={"csrf": "x"}).status_code == 401
            assert client.get("/", headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code == 403
            ok = client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 200 and "llama-ft" in ok.text
            login = client.post("/login", data={"token": TOKEN, "next": "/"}, headers={"Origin": base})
            assert login.status_code == 303 and client.get("/").status_code == 200  # the cookie now
        with store.transaction() as tx:
            job = repo.get_job(tx, "llama-ft")
            assert job is not None and job.desired_state == DesiredState.ACTIVE.value
    finally:
        console.stop()
    assert TOKEN not in caplog.text
    assert "GET / 401" in caplog.text  # requests are logged: method, path, status


def test_a_request_is_logged_before_its_answer_is_sent(caplog: pytest.LogCaptureFixture) -> None:
    from orchestrator.console.requestlog import logged as _logged

    caplog.set_level(logging.INFO, logger="orch")
    seen_at_start: list[list[str]] = []

    def app(environ: dict[str, object], start_response: object) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])  # type: ignore[operator]
        return [b"ok"]

    def server_start(status: str, headers: object, exc_info: object = None) -> None:
        # What the server does next is send the answer: the line must be written by now.
        seen_at_start.append([r.getMessage() for r in caplog.records])

    body = _logged(app)({"REQUEST_METHOD": "GET", "PATH_INFO": "/jobs/a\nb"}, server_start)
    assert list(body) == [b"ok"]
    assert seen_at_start == [["GET /jobs/a%0Ab 200"]]  # logged first, and a decoded line break quoted


def test_a_stalled_client_does_not_hold_the_consoles_stop(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import threading

    from orchestrator.console import server

    monkeypatch.setattr(server, "CHANNEL_TIMEOUT_S", 600)  # the stalled connection outlives the bound below
    console = start_console(store, console_settings("127.0.0.1:0", None))
    with httpx.Client(base_url=f"http://127.0.0.1:{console.port}", timeout=30) as client:
        assert client.get("/jobs/llama-ft").status_code == 200
    # A browser's preconnect: connects, never sends a request (its handler thread waits on it).
    with socket.create_connection(("127.0.0.1", console.port)) as stalled:
        stalled.sendall(b"GET /")
        stopper = threading.Thread(target=console.stop)
        stopper.start()
        stopper.join(60)  # only a stop that does not wait for the stalled handler returns by then
        stopped = not stopper.is_alive()
    stopper.join()
    assert stopped


def test_relaunch_confirmation_says_where_the_job_restarts_from(store: Store) -> None:
    """Issue 31: the confirmation promised "from its last committed checkpoint" to a job that has none."""
    app = ConsoleApp(store, Guard(None), clock=lambda: NOW)
    none = " ".join(call(app, "GET", "/jobs/bert-pretrain/relaunch").body.split())
    assert "from the start: it has no committed checkpoint" in none and "last committed checkpoint" not in none
    some = " ".join(call(app, "GET", "/jobs/llama-ft/relaunch").body.split())
    assert re.search(r"from its last committed checkpoint \(step \d+, committed 2026-", some)


def test_the_server_bounds_headers_and_stops_cleanly(store: Store) -> None:
    """waitress: an oversized header block is refused before the app, no server banner is sent, and ``stop``
    ends the loop thread and frees the port."""
    import socket

    from orchestrator.console import server

    console = start_console(store, console_settings("127.0.0.1:0", None))
    port = console.port
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            ok = client.get("/jobs/llama-ft")
            assert ok.status_code == 200 and "server" not in ok.headers
            assert ok.headers["x-frame-options"] == "DENY"
            big = client.get("/", headers={"X-Pad": "a" * (server.MAX_HEADER_BYTES + 1)})
            assert big.status_code == 431
    finally:
        console.stop()
    assert not console.thread.is_alive()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_a_job_torn_down_whose_machine_still_runs_says_it_still_bills(store: Store) -> None:
    """The fleet page showed a torn-down job's badge and nothing more while its machine still ran (a terminate
    refused or unanswered); like `orch status`'s `stopping!`, the page now says it still bills."""
    from orchestrator.app import down as app_down

    app = ConsoleApp(store, Guard(None), clock=lambda: NOW)

    def job_body(name: str) -> str:
        page = call(app, "GET", "/").body
        start = page.index(f'data-job="{name}"')
        return page[start:page.index("</tbody>", start)]

    assert "still bills" not in call(app, "GET", "/").body
    assert app_down.mark_down(store, ["llama-ft"]) == ["llama-ft"]
    assert "still bills: its machine is not confirmed gone" in job_body("llama-ft")
    assert "still bills" not in job_body("bert-pretrain")


def test_stop_after_the_loop_has_closed_everything_is_quiet(store: Store) -> None:
    """The loop can see ``stopping`` and close every descriptor, its wake-up trigger too, before ``stop`` pulls
    that trigger (a race seen in CI: EBADF from ``stop``). Played in that order here: ``stop`` still returns
    quietly, with the loop ended."""
    console = start_console(store, console_settings("127.0.0.1:0", None))
    console.stopping.set()
    console.thread.join(timeout=30)          # the loop ends at its next step (0.25 s at most) and closes all
    assert not console.thread.is_alive()
    console.stop()
