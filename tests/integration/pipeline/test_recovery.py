"""Faults: a worker killed with SIGKILL mid-run, a broker message that vanished, Redis dropping its connections."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import redis

from tests.integration.pipeline.conftest import effects, wait_until
from tests.support import services
from tests.support.stack import Stack, running_stack


def post(stack: Stack, tool: str, arguments: dict[str, object]) -> str:
    with stack.client() as client:
        response = client.post("/v1/tool-calls", json={"tool": tool, "arguments": arguments})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def timeline(stack: Stack, receipt_id: str) -> list[tuple[str | None, str, int, str]]:
    with stack.client() as client:
        events = client.get(f"/v1/receipts/{receipt_id}/events").json()["data"]
    return [(e["from_status"], e["to_status"], e["attempt"], e["actor"]) for e in events]


def test_worker_killed_mid_run_read_completes_and_write_ends_outcome_unknown(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        read = post(stack, "short_read", {"tag": "read", "seconds": 3})
        write = post(stack, "short_write", {"tag": "write", "seconds": 3})
        wait_until(lambda: all(effects(stack.effects, tag, "start") == 1 for tag in ("read", "write")),
                   30, "both tools to be running")
        worker = next(p for p in stack.processes if p.name == "worker1")
        worker.kill(signal.SIGKILL)  # the whole process group: main process and pool children
        assert effects(stack.effects, "read", "done") == 0
        assert effects(stack.effects, "write", "done") == 0

        stack.start_worker()  # a fresh worker; its sweeper reclaims the leases once they expire
        read_final = stack.wait_terminal(read, timeout=90)
        write_final = stack.wait_terminal(write, timeout=90)

        assert read_final["status"] == "success", stack.logs()
        assert read_final["output"] == {"tag": "read"}
        assert read_final["attempt"] == 2
        assert effects(stack.effects, "read", "start") == 2
        assert effects(stack.effects, "read", "done") == 1
        steps = timeline(stack, read)
        assert ("running", "pending", 1, "sweeper") in steps
        assert [s[:3] for s in steps][-2:] == [("pending", "running", 2), ("running", "success", 2)]

        assert write_final["status"] == "failed", stack.logs()
        assert write_final["error"]["code"] == "outcome_unknown"
        assert write_final["error"]["retryable"] is False
        assert write_final["attempt"] == 1
        assert timeline(stack, write)[-1] == ("running", "failed", 1, "sweeper")
        # The write ran at most once: started once, never finished, never started again.
        assert effects(stack.effects, "write", "start") == 1
        assert effects(stack.effects, "write", "done") == 0


def test_lost_broker_message_is_republished_by_the_sweeper(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        # The worker published the catalogue; stop it so the next message waits in Redis.
        next(p for p in stack.processes if p.name == "worker1").kill(signal.SIGKILL)
        receipt_id = post(stack, "echo", {"lost": True})

        client = redis.Redis.from_url(services.REDIS_URL)
        try:
            queue = f"{stack.prefix}tools"
            wait_until(lambda: any(receipt_id.encode() in m for m in client.lrange(queue, 0, -1)), 10,
                       "the execute message in the Redis queue")
            removed = sum(client.lrem(queue, 0, m) for m in client.lrange(queue, 0, -1) if receipt_id.encode() in m)
            assert removed == 1
            assert not any(receipt_id.encode() in m for m in client.lrange(queue, 0, -1))
        finally:
            client.close()

        stack.start_worker()
        final = stack.wait_terminal(receipt_id, timeout=60)
        assert final["status"] == "success", stack.logs()
        assert final["output"] == {"lost": True}
        assert final["attempt"] == 1
        assert "republished 1" in "\n".join(p.log() for p in stack.processes if p.name == "beat")  # beat sweeps


def test_calls_complete_after_redis_drops_every_connection(stack: Stack) -> None:
    first = post(stack, "echo", {"n": 1})
    assert stack.wait_terminal(first)["status"] == "success", stack.logs()

    client = redis.Redis.from_url(services.REDIS_URL)
    try:
        killed = client.client_kill_filter(_type="normal", skipme=True)  # as a Redis restart would
        assert killed >= 2  # at least the worker's BRPOP connection and the gateway's publisher
        ids = [post(stack, "echo", {"n": n}) for n in range(2, 6)]
        for receipt_id in ids:
            final = stack.wait_terminal(receipt_id, timeout=60)
            assert final["status"] == "success", stack.logs()
        # Every message taken was acked: the worker's unacked bookkeeping survived the reconnect.
        wait_until(lambda: client.hlen(f"{stack.prefix}unacked") == 0, 10, "an empty unacked hash")
    finally:
        client.close()


def pool_children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a Celery worker's prefork pool)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def test_pool_processes_killed_mid_run_the_same_worker_recovers(tmp_path: Path) -> None:
    """Only the pool children die (as under the OOM killer): Celery re-queues their messages, the
    redelivery finds the receipt claimed and is dropped, and the sweeper settles it after the lease."""
    with running_stack(tmp_path) as stack:
        read = post(stack, "short_read", {"tag": "read", "seconds": 3})
        write = post(stack, "short_write", {"tag": "write", "seconds": 3})
        wait_until(lambda: all(effects(stack.effects, tag, "start") == 1 for tag in ("read", "write")),
                   30, "both tools to be running")
        worker = next(p for p in stack.processes if p.name == "worker1")
        children = pool_children(worker.popen.pid)
        assert len(children) == 2
        for child in children:
            os.kill(child, signal.SIGKILL)

        read_final = stack.wait_terminal(read, timeout=90)
        write_final = stack.wait_terminal(write, timeout=90)
        assert worker.popen.poll() is None  # the worker itself lived on

        assert read_final["status"] == "success", stack.logs()
        assert read_final["attempt"] == 2
        assert effects(stack.effects, "read", "start") == 2
        assert write_final["status"] == "failed", stack.logs()
        assert write_final["error"]["code"] == "outcome_unknown"
        assert effects(stack.effects, "write", "start") == 1
        assert effects(stack.effects, "write", "done") == 0
