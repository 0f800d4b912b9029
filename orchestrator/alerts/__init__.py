"""Alerts as values: the kinds orch alerts on and the alert with its two wire forms (``model``), and a webhook URL that
never shows its secret (``redact``).

The config's ``alerts:`` section is read by orchestrator/config/file/alerts.py; the daemon maps the store's events to
alerts (orchestrator/daemon/loop/alert_events.py: the ONE place) and sends them, a background worker per webhook
(orchestrator/daemon/loop/alerts.py).
"""
