"""What every provider's settings share: how its transient failures are retried (SDK-free)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from providers.retry import RetryPolicy


class RetrySettings(BaseModel):
    """Mixed into each provider's ``Settings``: attempts, backoff and the deadline for retryable errors."""

    retry_attempts: int = Field(default=6, ge=1)
    retry_initial_wait_s: float = Field(default=0.5, ge=0)
    retry_max_wait_s: float = Field(default=8.0, ge=0)
    retry_deadline_s: float = Field(default=60.0, gt=0)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(attempts=self.retry_attempts, initial_wait_s=self.retry_initial_wait_s,
                           max_wait_s=self.retry_max_wait_s, deadline_s=self.retry_deadline_s)
