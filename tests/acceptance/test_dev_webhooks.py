"""``toolrelay dev`` delivers signed webhooks with no services, and keeps doing so across a SIGKILL."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.receiver import Receiver, Reply
from tests.support.stack import ROOT, Process, free_port, wait_serving

KEY = "trk_dev-webhooks-acceptance"


@contextmanager
def dev(tmp: Path, port: int, name: str = "dev", *, stop: int = signal.SIGTERM) -> Iterator[httpx.Client]:
    """A ``toolrelay dev`` serving ``tmp/data`` while in the block, ended with ``stop`` after it: SIGTERM
    stops its embedded PostgreSQL too; SIGKILL leaves that running, for the next dev to find."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRELAY_")}
    env.update({"PYTHONPATH": str(ROOT), "TOOLRELAY_OUTBOUND_ALLOW_CIDRS": "127.0.0.0/8",
                "TOOLRELAY_WEBHOOK_RETRY_SCHEDULE": "0,1,1,1,1,1,1,1"})
    process = Process(name, [sys.executable, "-m", "toolrelay", "dev", "--port", str(port), "--data-dir",
                             str(tmp / "data"), "--api-key", KEY], env, tmp)
    base = f"http://127.0.0.1:{port}"
    wait_serving(process, base, timeout=60)
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
            yield client
    finally:
        process.kill(stop)


def register(client: httpx.Client, receiver: Receiver, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/webhook-endpoints", json={"url": receiver.url, **body})
    assert response.status_code == 201, response.text
    receiver.secrets.append(response.json()["secret"])
    return response.json()  # type: ignore[no-any-return]


def test_dev_mode_delivers_signed_webhooks(tmp_path: Path) -> None:
    with Receiver() as receiver, dev(tmp_path, free_port()) as client:
        register(client, receiver)
        secret = client.post("/v1/webhook-secret").json()["secret"]
        receiver.secrets.append(secret)
        with Receiver(secrets=[secret]) as own:
            receipt = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"hello": "dev"},
                                                          "webhook_url": own.url}).json()
            succeeded = receiver.wait_for(1, type="receipt.succeeded")[0]
            assert succeeded.verified_by == (0,) and succeeded.payload["data"]["output"] == {"hello": "dev"}
            assert succeeded.headers["x-receipt-id"] == receipt["id"]
            assert receiver.wait_for(1, type="receipt.running")[0].verified_by == (0,)
            assert {r.payload["type"] for r in own.wait_for(2)} == {"receipt.running", "receipt.succeeded"}
            assert all(r.verified_by == (0,) for r in own.requests)


def test_dev_mode_killed_mid_delivery_delivers_after_restart(tmp_path: Path) -> None:
    port = free_port()
    with Receiver() as receiver:
        receiver.respond(Reply(200, delay_s=120))  # the first attempt hangs until the process dies
        with dev(tmp_path, port, "dev-first", stop=signal.SIGKILL) as client:
            register(client, receiver, event_types=["receipt.succeeded"])
            client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"n": 1}})
            hanging = receiver.wait_for(1, timeout=60)[0]
        # Killed while the message was leased to its dispatcher (a lease of two minutes by default).
        started = time.monotonic()
        with dev(tmp_path, port, "dev-second"):
            again = receiver.wait_for(2, timeout=60)[1]
        assert again.webhook_id == hanging.webhook_id and again.verified_by == (0,)
        assert time.monotonic() - started < 60  # freed at start, not after the lease ran out
