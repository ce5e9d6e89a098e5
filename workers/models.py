"""Calling a run's model: an OpenAI-compatible Chat Completions endpoint, through the guarded egress.

The ``openai`` SDK makes the request; its HTTP client's every connection passes the SSRF guard (a
model's ``base_url`` is checked when it is defined, and again here, at connect time, since DNS
answers change). The SDK's own retries are off: the run retries what may pass (429, 5xx, a network
failure or a timeout), with backoff and any ``Retry-After``, within the run's deadline; anything else
fails the run with ``upstream_error`` and the model's message.

Errors, mapped where they enter::

    openai.RateLimitError, InternalServerError,
    APIConnectionError, APITimeoutError     -> ModelUnavailable (retryable; retry_after_s if given)
    other openai.APIStatusError             -> ModelRefused     (the model's message)
    the SSRF guard's refusal                -> ModelRefused
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx2
import openai

from receipts.outbound.guard import OutboundGuard
from receipts.storable import mended
from workers.egress import retry_after_ms, traced2
from workers.errors import ToolFailure
from workers.guarded_transport import GuardedTransport2

USER_AGENT = "toolrelay/0.1"


class ModelError(Exception):
    """The model call failed."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s
        self.status = status


class ModelUnavailable(ModelError):
    """The model did not answer now; the same request may work later."""


class ModelRefused(ModelError):
    """The model refused the request; sending it again cannot help."""


@dataclass(frozen=True, slots=True)
class Completion:
    """The model's answer: the assistant message as the API shapes it, the tokens it cost, and how long it took."""

    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float


def _guarded_client(guard: OutboundGuard, timeout_s: float) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=traced2(GuardedTransport2(guard)), trust_env=False, follow_redirects=False,
                              headers={"User-Agent": USER_AGENT}, timeout=httpx2.Timeout(timeout_s))


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = retry_after_ms(exc.response.headers.get("retry-after"))
    return None if value is None else value / 1000


def _message_of(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return str(exc.message)


async def complete(guard: OutboundGuard, *, base_url: str, api_key: str | None, model: str,
                   messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: dict[str, Any],
                   timeout_s: float) -> Completion:
    """One Chat Completions call.

    Raises:
        ModelUnavailable: 429, 5xx, a network failure or a timeout.
        ModelRefused: any other refusal (the model's message), or an address the guard refuses.
    """
    started = time.perf_counter()
    async with _guarded_client(guard, timeout_s) as http:
        client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "unused", http_client=http, max_retries=0,
                                    timeout=timeout_s)
        request: dict[str, Any] = {**params, "model": model, "messages": messages}
        if tools:
            request["tools"] = tools
        try:
            response = await client.chat.completions.create(**request)
        except openai.RateLimitError as exc:
            raise ModelUnavailable(f"the model answered 429: {_message_of(exc)}", retry_after_s=_retry_after(exc),
                                   status=429) from None
        except openai.InternalServerError as exc:
            raise ModelUnavailable(f"the model answered {exc.status_code}: {_message_of(exc)}",
                                   retry_after_s=_retry_after(exc), status=exc.status_code) from None
        except openai.APIStatusError as exc:
            raise ModelRefused(f"the model answered {exc.status_code}: {_message_of(exc)}",
                               status=exc.status_code) from None
        except openai.APITimeoutError:
            raise ModelUnavailable(f"the model did not answer within {timeout_s:g} s") from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__
            if isinstance(cause, ToolFailure):  # the SSRF guard, where the connection is made
                raise ModelRefused(cause.message) from None
            raise ModelUnavailable(f"cannot reach the model at {base_url}: {cause or exc}") from None
    choice = response.choices[0]
    message = mended(choice.message.model_dump(mode="json", exclude_none=True))  # storable, as the model said it
    message.setdefault("role", "assistant")
    usage = response.usage
    return Completion(message=message, prompt_tokens=usage.prompt_tokens if usage else 0,
                      completion_tokens=usage.completion_tokens if usage else 0,
                      latency_ms=(time.perf_counter() - started) * 1000)
