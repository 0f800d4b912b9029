"""Alerts: what orch tells people, through webhooks, when something they pay for changes.

``model`` (the alert kinds and the alert value), ``config`` (the ``alerts:`` section), ``mapping`` (the ONE
place store events become alerts), ``redact`` (what of a webhook URL may be shown), ``dispatch`` (a
background worker per webhook with a bounded queue and retries: a tick never waits on a receiver).
"""
