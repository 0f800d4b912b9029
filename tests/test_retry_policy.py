"""providers/retry.py: what ends the retries. In the tests' fast policy only the attempts end them: on a loaded
machine one answer of a local fake can take seconds, and a deadline of 5 s cut a counted series short (an Azure
test saw 1 request of 4). tenacity's clock is a fake here: each call "takes" as long as the test says."""

from __future__ import annotations

import types

import pytest
import tenacity

from providers.errors import ProviderUnavailableError
from providers.retry import RetryPolicy, call_with_retry


def _calls_taking(seconds: float, policy: RetryPolicy, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many calls ``policy`` makes of one that is always unavailable and takes ``seconds`` each."""
    now = [0.0]
    monkeypatch.setattr(tenacity, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    calls: list[int] = []

    def unavailable() -> None:
        calls.append(1)
        now[0] += seconds
        raise ProviderUnavailableError("down")

    with pytest.raises(ProviderUnavailableError):
        call_with_retry(unavailable, policy, sleep=lambda _s: None)
    return len(calls)


def test_the_fast_policy_makes_every_attempt_however_slow_the_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _calls_taking(30.0, RetryPolicy.fast(), monkeypatch) == RetryPolicy.fast().attempts


def test_a_deadline_passed_stops_the_retries_before_the_attempts_run_out(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = RetryPolicy(attempts=6, initial_wait_s=0.001, max_wait_s=0.01, deadline_s=10.0)
    assert _calls_taking(4.0, policy, monkeypatch) == 3       # 4 s, 8 s, then 12 s: past the deadline
