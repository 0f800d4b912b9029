"""The one HTTP layer for the REST/GraphQL providers (RunPod, Vast.ai, Lambda).

What it owns, so the adapters don't each re-write it: timeouts, the Bearer header (never logged),
client-side rate limiting, retries with backoff on 429/5xx/connection errors (providers.retry), and a
single hook, ``translate``, through which each adapter turns a failed response into the taxonomy.
"""

from __future__ import annotations

import functools
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from providers.errors import AuthError, ProviderError, ProviderUnavailableError, RateLimitedError
from providers.retry import RetryPolicy, call_with_retry

T = TypeVar("T")


class RateLimiter:
    """A minimum interval between calls (token bucket of one), shared by threads. Waits, never fails."""

    def __init__(self, min_interval_s: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._sleep = sleep
        self._next = 0.0
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Block until a call may go; return how long it waited."""
        with self._lock:
            now = self._clock()
            wait = max(0.0, self._next - now)
            self._next = max(now, self._next) + self.min_interval_s
        if wait > 0:
            self._sleep(wait)
        return wait


#: Turns a response the server called a failure (status >= 400, or a provider's own error envelope)
#: into a ProviderError. Returns None when the response is a success.
Translator = Callable[[httpx.Response], ProviderError | None]


@dataclass(frozen=True, slots=True)
class HttpSettings:
    base_url: str
    api_key: str | None
    timeout_s: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@functools.cache
def _tls_context() -> ssl.SSLContext | bool:
    """httpx's own default verifying context, built once per process and shared by every client (an SSLContext
    is safe to share): building it loads the whole CA bundle, tens of milliseconds a client otherwise, and an
    adapter is built per command, per daemon tick's providers and many times per test. Before httpx 0.28 (no
    public ``create_ssl_context``): True, httpx's per-client default as before."""
    make = getattr(httpx, "create_ssl_context", None)
    return make() if make is not None else True


class ApiClient:
    """A small JSON client over httpx with retries, limiting and error translation."""

    def __init__(self, provider: str, settings: HttpSettings, translate: Translator,
                 limiter: RateLimiter | None = None, transport: httpx.BaseTransport | None = None,
                 key_hint: str | None = None) -> None:
        self.provider = provider
        self.settings = settings
        self._translate = translate
        self._limiter = limiter
        #: Where a key comes from: said when the cloud refuses a request sent without one (no key was found).
        self._key_hint = key_hint
        headers = {"Accept": "application/json", "User-Agent": "orch/0.1"}
        if settings.api_key:
            headers["Authorization"] = f"Bearer {settings.api_key}"
        self._client = httpx.Client(base_url=settings.base_url, headers=headers,
                                    timeout=settings.timeout_s, transport=transport, follow_redirects=True,
                                    verify=_tls_context())

    def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None,
                limiter: RateLimiter | None = None, decode: Callable[[bytes], Any] | None = None) -> Any:
        """Send one request (retrying transient failures); return the decoded JSON body (None if empty).

        ``limiter`` adds a second, stricter limiter for this call (Lambda's launch limit). ``decode`` turns
        the body's bytes into the answer instead of the plain JSON decoding (a ``SameBody``); a ValueError
        from it is a non-JSON answer, as from the plain decoding.
        """

        def once() -> Any:
            for lim in (self._limiter, limiter):
                if lim is not None:
                    lim.acquire()
            try:
                response = self._client.request(method, path, json=json, params=params)
            except httpx.TimeoutException as exc:
                raise ProviderUnavailableError(f"timed out: {method} {path}", provider=self.provider) from exc
            except httpx.TransportError as exc:
                raise ProviderUnavailableError(f"connection failed: {exc}", provider=self.provider) from exc
            error = self._translate(response)
            if error is None and response.status_code >= 400:
                error = default_http_error(self.provider, response)
            if isinstance(error, AuthError) and not self.settings.api_key:
                # Not "key refused" (the cloud's words): there was none to refuse.
                raise AuthError("no API key found", provider=self.provider,
                                hint=self._key_hint or error.hint) from error
            if error is not None:
                raise error
            if not response.content:
                return None
            try:
                return response.json() if decode is None else decode(response.content)
            except ValueError as exc:
                raise ProviderUnavailableError(
                    f"non-JSON answer to {method} {path} (HTTP {response.status_code})", provider=self.provider
                ) from exc

        return call_with_retry(once, self.settings.retry)

    def close(self) -> None:
        self._client.close()


class SameBody(Generic[T]):
    """A body's decoding, kept while the server answers the same bytes.

    A cloud listing at thousands of machines is several MB of JSON; decoding it and building an Instance per
    machine cost ~0.35 s of CPU every tick at 10k, though a steady fleet's listing comes back byte for byte
    the same. Comparing the bytes costs a memcmp. ``decode`` must be pure (the same bytes, an equal answer)
    and its answer immutable (it is handed out again): a tuple of frozen values, not a dict.
    """

    def __init__(self, decode: Callable[[bytes], T]) -> None:
        self._decode = decode
        self._last: tuple[bytes, T] | None = None

    def __call__(self, body: bytes) -> T:
        last = self._last
        if last is not None and last[0] == body:
            return last[1]
        value = self._decode(body)
        self._last = (body, value)
        return value


def default_http_error(provider: str, response: httpx.Response) -> ProviderError:
    """Status-code fallback for responses an adapter's translator did not classify."""
    from providers.errors import AuthError, InstanceNotFoundError, InvalidRequestError

    status = response.status_code
    text = response.text[:200]
    if status == 429:
        return RateLimitedError(f"rate limited (HTTP 429): {text}", provider=provider)
    if status >= 500:
        return ProviderUnavailableError(f"server error HTTP {status}: {text}", provider=provider)
    if status in (401, 403):
        return AuthError(f"credentials refused (HTTP {status})", provider=provider)
    if status == 404:
        return InstanceNotFoundError(f"not found (HTTP 404): {text}", provider=provider)
    return InvalidRequestError(f"request refused (HTTP {status}): {text}", provider=provider)
