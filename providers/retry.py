"""Retrying transient provider errors with backoff and a deadline (tenacity underneath).

Only errors whose class says ``retryable`` (RateLimitedError, ProviderUnavailableError) are retried.
Capacity and quota errors are raised at once: the planner moves on instead of hammering one offer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import tenacity

from providers.errors import ProviderError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 6
    initial_wait_s: float = 0.5
    max_wait_s: float = 8.0
    deadline_s: float = 60.0

    @classmethod
    def fast(cls) -> RetryPolicy:
        """For tests against local fakes: same logic, waits in milliseconds. The attempts, not the clock, end
        the retries: a deadline a test could reach (5 s) cut retries short on a loaded machine, where one
        answer of a local fake can take that long (an Azure test saw 1 request of the 4 it counts)."""
        return cls(attempts=4, initial_wait_s=0.001, max_wait_s=0.01, deadline_s=600.0)


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``; retry it while it raises a retryable ProviderError, within attempts and deadline.

    The last error is re-raised unchanged when retries run out, so callers see the taxonomy class.
    """
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(_is_retryable),
        stop=tenacity.stop_after_attempt(policy.attempts) | tenacity.stop_after_delay(policy.deadline_s),
        # Exponential backoff plus up to one initial wait of jitter, so retrying clients do not march in step.
        wait=tenacity.wait_exponential(multiplier=policy.initial_wait_s, max=policy.max_wait_s)
        + tenacity.wait_random(0, policy.initial_wait_s),
        sleep=sleep,
        reraise=True,
    )
    return retrying(fn)
