"""toolrelay's Python SDK: submit tool calls, wait for their receipts, list them, verify webhooks.

::

    from toolrelay.client import Client

    with Client("http://127.0.0.1:8000", api_key=KEY) as client:
        receipt = client.submit("calculate", {"expression": "(2 + 3) * 4"}, trace_id="trace_demo")
        receipt = client.wait(receipt.id, timeout=30)
        print(receipt.status, receipt.output)
        for earlier in client.list(trace_id="trace_demo"):
            print(earlier.id, earlier.status)

:class:`AsyncClient` has the same methods, awaited. The package speaks to toolrelay over HTTP only:
it imports nothing of the server, just httpx and standardwebhooks.

Modules: ``operations`` (each request, as data) and ``responses`` (each answer's parser), ``flows``
(wait and pagination, as generators), ``records``, ``errors``, ``signatures``; ``sync_client`` and
``async_client`` send the operations.
"""

from toolrelay.client.async_client import AsyncClient
from toolrelay.client.errors import (
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    Retryable,
    ToolrelayError,
    Unauthorized,
    Unavailable,
    UnexpectedResponse,
    WaitTimeout,
    WebhookVerificationFailed,
)
from toolrelay.client.records import Batch, Event, Model, Receipt, Run, Tool
from toolrelay.client.signatures import verify_webhook
from toolrelay.client.sync_client import Client

__all__ = [
    "AsyncClient",
    "Batch",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "Event",
    "Forbidden",
    "InvalidRequest",
    "Model",
    "NotFound",
    "RateLimited",
    "Receipt",
    "Retryable",
    "Run",
    "Tool",
    "ToolrelayError",
    "Unauthorized",
    "Unavailable",
    "UnexpectedResponse",
    "WaitTimeout",
    "WebhookVerificationFailed",
    "verify_webhook",
]
