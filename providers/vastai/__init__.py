"""Vast.ai: a marketplace of hosts' machines over REST (console.vast.ai/api/v0), reached with httpx.

``settings`` is SDK-free and cheap to import; ``adapter`` holds ``VastProvider``.
"""
