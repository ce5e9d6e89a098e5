"""Production mode: ``toolrelay migrate``, ``keys create``, ``gateway``, ``worker`` and ``beat`` on PostgreSQL
and Redis, with the user's own tools loaded from TOOLRELAY_TOOL_MODULES."""

from __future__ import annotations

import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.acceptance.conftest import clean_env, serving, start, toolrelay, wait_until
from tests.support import services
from tests.support.stack import TERMINAL, Process, free_port

USER_TOOLS = '''
"""The user's own tools."""

import asyncio

from toolrelay import ToolContext, tool


@tool(effect="write", idempotent=False, timeout_s=10)
def create_ticket(title: str, priority: int, ctx: ToolContext, tags: list[str] | None = None) -> dict:
    """Open a ticket in the helpdesk."""
    return {"ticket": f"T-{priority}-{title}", "tags": tags or [], "key": ctx.receipt_id}


@tool
async def convert(amount: float, rate: float = 1.1) -> dict:
    """Convert an amount at a rate, asynchronously."""
    await asyncio.sleep(0.01)
    return {"converted": round(amount * rate, 2)}
'''


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """A fresh PostgreSQL database, a Redis key prefix, and the user's tool module on PYTHONPATH."""
    modules = tmp_path / "usercode"
    modules.mkdir()
    (modules / "acme_tools.py").write_text(textwrap.dedent(USER_TOOLS))
    database_url = services.create_database()
    prefix = services.redis_prefix()
    env = clean_env(
        TOOLRELAY_DATABASE_URL=database_url,
        TOOLRELAY_BROKER_URL=services.REDIS_URL,
        TOOLRELAY_BROKER_KEY_PREFIX=prefix,
        TOOLRELAY_TOOL_MODULES="acme_tools",
        TOOLRELAY_SWEEP_INTERVAL_S="0.5",
        PYTHONPATH=str(modules),
    )
    try:
        yield env, tmp_path
    finally:
        services.clear_redis_prefix(prefix)
        services.drop_database(database_url)


def test_migrate_keys_gateway_worker_beat_with_user_tools(deployment: tuple[dict[str, str], Path]) -> None:
    env, tmp = deployment
    for _ in range(2):  # safe to run again
        migrated = toolrelay("migrate", env=env, cwd=tmp)
        assert migrated.returncode == 0, migrated.stderr
        assert "database is up to date" in migrated.stdout

    created = toolrelay("keys", "create", "--tenant", "acme", env=env, cwd=tmp)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("trk_") and " " not in key
    other = toolrelay("keys", "create", "--tenant", "globex", env=env, cwd=tmp).stdout.strip().splitlines()[-1]
    assert other != key

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    processes: list[Process] = []
    try:
        processes.append(start("gateway", "gateway", "--host", "127.0.0.1", "--port", str(port), env=env, cwd=tmp))
        wait_until(serving(base_url), 60, "the gateway", processes[0])
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as client:
            assert client.get("/v1/tools").json()["data"] == []  # the catalogue is what workers publish
            unknown = client.post("/v1/tool-calls", json={"tool": "convert", "arguments": {"amount": 1}})
            assert unknown.status_code == 422 and unknown.json()["errors"][0]["field"] == "tool"
        worker = start("worker", "worker", "-c", "2", "--without-heartbeat", "--without-gossip", "--without-mingle",
                       env=env, cwd=tmp)
        processes.append(worker)
        wait_until(lambda: "ready." in worker.log(), 60, "the worker", worker)
        processes.append(start("beat", "beat", "--schedule", str(tmp / "beat-schedule"), env=env, cwd=tmp))

        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=70) as client:
            tools = {t["name"]: t for t in client.get("/v1/tools").json()["data"]}
            assert {"create_ticket", "convert", "echo"} <= set(tools)
            ticket = tools["create_ticket"]
            assert (ticket["effect"], ticket["idempotent"], ticket["timeout_s"]) == ("write", False, 10)
            assert ticket["description"] == "Open a ticket in the helpdesk."
            assert set(ticket["parameters"]["properties"]) == {"title", "priority", "tags"}
            assert sorted(ticket["parameters"]["required"]) == ["priority", "title"]

            # Validation from the catalogue: refused before anything is stored.
            refused = client.post("/v1/tool-calls", json={"tool": "create_ticket",
                                                          "arguments": {"title": "x", "priority": "high"}})
            assert refused.status_code == 422
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert refused.json()["errors"] == [{"field": "arguments.priority", "message": "'high' is not of type "
                                                 "'integer'"}]
            assert client.get("/v1/receipts", params={"tool": "create_ticket"}).json()["data"] == []

            sync_call = client.post("/v1/tool-calls", json={"tool": "create_ticket", "wait_s": 30,
                                                            "arguments": {"title": "printer", "priority": 2}})
            assert sync_call.status_code == 200, sync_call.text
            body = sync_call.json()
            assert body["status"] == "success"
            assert body["output"] == {"ticket": "T-2-printer", "tags": [], "key": body["id"]}

            async_call = client.post("/v1/tool-calls", json={"tool": "convert", "arguments": {"amount": 10}})
            assert async_call.status_code == 202
            done = client.get(f"/v1/receipts/{async_call.json()['id']}", params={"wait_s": 30}).json()
            assert done["status"] in TERMINAL
            assert done["output"] == {"converted": 11.0}

        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {other}"}, timeout=10) as intruder:
            assert intruder.get(f"/v1/receipts/{body['id']}").status_code == 404
    finally:
        for process in processes:
            process.kill(signal.SIGTERM)
