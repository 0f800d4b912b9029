"""``orch events``: the event log, oldest first, and following it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import (
    open_store_or_fail,
    out,
)
from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, MIN_POLL_S, check_number, fail, wrap
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app

if TYPE_CHECKING:
    from orchestrator.app.status import EventView

#: The indent of an event's continuation lines: a line that starts with a date is a new event, one that starts
#: with spaces goes on with the event above.
CONTINUATION = "    "


def event_text(e: EventView) -> str:
    """``e``'s line in 80 columns: a long message (a cloud's error, say) goes on in lines indented by
    CONTINUATION, never cut (a word longer than a line, a URL, stays whole). Control characters are escaped
    first, so the escapes' width counts."""
    from orchestrator.redaction import terminal_safe

    return wrap(terminal_safe(e.line()), indent=CONTINUATION)


# -- events --------------------------------------------------------------------------------------------

@app.command("events")
def events_cmd(
    job: Annotated[str | None, typer.Argument(help="Only this job's events.", show_default=False)] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events (Ctrl-C stops).")]
    = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines, one event each.")] = False,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many past events.")] = None,
    max_wait: Annotated[float | None, typer.Option("--max-wait", help="With -f: stop after this many seconds "
                                                   "without a new event.")] = None,
    poll: Annotated[float, typer.Option("--poll", help="With -f: seconds between polls.")] = 1.0,
) -> None:
    """The event log: what orch did and saw, oldest first (a repeated condition once, with its count)."""
    from orchestrator.app.errors import JobsError
    from orchestrator.app.status import events
    from orchestrator.app.status import follow as follow_events

    if limit is not None and limit < 1:
        fail("--limit must be 1 or more", EXIT_BAD_INPUT)
    check_number("--poll", poll, low=MIN_POLL_S, high=3600)
    check_number("--max-wait", max_wait, low=0, high=365 * 86400)

    def emit(e: EventView) -> None:
        out(dumps(e.to_json()) if as_json else event_text(e))
        sys.stdout.flush()

    store = open_store_or_fail()
    try:
        past = events(store, job)
        if limit is not None:
            past = past[-limit:]
        for e in past:
            emit(e)
        if not past and not as_json and not follow:   # as `orch status` says no jobs (--json: no lines)
            out(f"no events for job {job}" if job else "no events (apply some manifests: orch apply PATH)")
        if follow:
            after = past[-1].id if past else None
            try:
                for e in follow_events(store, job, after_id=after, poll_s=poll, max_wait_s=max_wait):
                    emit(e)
            except KeyboardInterrupt:
                pass
    except JobsError as exc:
        fail(str(exc), EXIT_NO_MATCH)
    finally:
        store.close()
