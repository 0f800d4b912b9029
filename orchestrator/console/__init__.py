"""orch's web console: the fleet, spend over time, budgets, the event log and each job's timeline, with two
actions (stop a job, relaunch it now). Served by ``orch daemon --console`` and by ``orch console``.

Server-rendered pages (Jinja2, autoescaped) served by waitress (a production WSGI server), charts as SVG drawn
here, no JavaScript. Reads go through ``orchestrator.store.console_queries``; the two actions through
``orchestrator.store.requests``. Loopback by default; any other address needs a token (``settings``).
Importing this package imports nothing heavy; ``server`` and ``app`` import Jinja2, waitress and the store.
"""
