"""``toolrelay keys create|list|revoke`` and ``toolrelay purge`` as an operator runs them, against a
running ``toolrelay gateway``."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from receipts.catalogue import tools as catalogue
from receipts.db import Database
from receipts.records import ToolSpec
from tests.acceptance.conftest import clean_env, serving, start, toolrelay, wait_until
from tests.support import services, sql
from tests.support.stack import free_port
from tests.unit.receipts.test_retention import finished, open_receipt

TOOLS = [ToolSpec(name=name, kind="python", description=f"{name} for tests", parameters={"type": "object"})
         for name in ("note", "lookup", "charge")]


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[dict[str, str], Database]]:
    url = services.create_database()
    db = Database(url, pool_size=1, name="toolrelay-test")
    db.run(catalogue.publish(TOOLS))  # as a worker would
    env = clean_env(TOOLRELAY_DATABASE_URL=url, TOOLRELAY_AUTH_CACHE_S="1")
    try:
        yield env, db
    finally:
        db.dispose()
        services.drop_database(url)


def create(env: dict[str, str], cwd: Path, *args: str) -> tuple[str, str]:
    """Run ``keys create``: (its output, the key on its last line)."""
    done = toolrelay("keys", "create", *args, env=env, cwd=cwd)
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip().splitlines()[-1]
    assert key.startswith("trk_") and " " not in key
    return done.stdout, key


def listed(env: dict[str, str], cwd: Path, *args: str) -> list[dict[str, object]]:
    done = toolrelay("keys", "list", "--json", *args, env=env, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_keys_with_scopes_from_the_command_line(database: tuple[dict[str, str], Database], tmp_path: Path) -> None:
    env, _db = database
    _, full = create(env, tmp_path, "--tenant", "acme")
    said, scoped = create(env, tmp_path, "--tenant", "acme", "--tools", "note,lookup", "--read-only",
                          "--expires-in", "30d")
    assert "lookup,note read-only" in said and "key_" in said
    _, other = create(env, tmp_path, "--tenant", "globex", "--tools", "charge")

    table = toolrelay("keys", "list", env=env, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["ID", "TENANT", "PREFIX", "TOOLS", "ACCESS", "EXPIRES", "CREATED", "LAST", "USED",
                              "STATE"]
    assert len(lines) == 3
    scoped_line = next(line for line in lines if scoped[:8] in line)
    assert "lookup,note" in scoped_line and "read-only" in scoped_line and "active" in scoped_line
    assert full not in table.stdout and scoped not in table.stdout  # never the keys themselves
    keys = listed(env, tmp_path, "--tenant", "acme")
    assert [(k["prefix"], k["tools"], k["read_only"]) for k in keys] == [
        (full[:8], None, False), (scoped[:8], ["lookup", "note"], True)]
    assert keys[0]["expires_at"] is None and isinstance(keys[1]["expires_at"], str)
    assert all(k["last_used_at"] is None and k["state"] == "active" for k in keys)

    bad = toolrelay("keys", "create", "--tenant", "acme", "--expires-in", "soon", env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "not a duration" in bad.stderr
    bad = toolrelay("keys", "create", "--tenant", "acme", "--tools", "Not A Tool", env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "--tools" in bad.stderr

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    gateway = start("gateway", "gateway", "--port", str(port), env=env, cwd=tmp_path)
    try:
        wait_until(serving(base_url), 60, "the gateway", gateway)

        def client(key: str) -> httpx.Client:
            return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10)

        with client(scoped) as limited:
            assert sorted(t["name"] for t in limited.get("/v1/tools").json()["data"]) == ["lookup", "note"]
            assert limited.get("/v1/tools/charge").status_code == 404
            refused = limited.post("/v1/tool-calls", json={"tool": "note", "arguments": {}})
            assert refused.status_code == 403 and "read-only" in refused.json()["detail"]
        with client(other) as globex:
            assert globex.post("/v1/tool-calls", json={"tool": "note", "arguments": {}}).status_code == 403
            assert globex.post("/v1/tool-calls", json={"tool": "charge", "arguments": {}}).status_code == 202
        with client(full) as acme:
            assert acme.post("/v1/tool-calls", json={"tool": "charge", "arguments": {}}).status_code == 202
        used = {k["prefix"]: k["last_used_at"] for k in listed(env, tmp_path)}
        assert all(used[key[:8]] is not None for key in (full, scoped, other))

        key_id = next(k["id"] for k in listed(env, tmp_path) if k["prefix"] == scoped[:8])
        revoked = toolrelay("keys", "revoke", str(key_id), env=env, cwd=tmp_path)
        assert revoked.returncode == 0 and f"revoked API key {key_id}" in revoked.stdout
        by_key = toolrelay("keys", "revoke", other, env=env, cwd=tmp_path)  # the key itself names it too
        assert by_key.returncode == 0 and "revoked API key key_" in by_key.stdout
        again = toolrelay("keys", "revoke", other, env=env, cwd=tmp_path)
        assert again.returncode == 0 and "already revoked" in again.stdout
        unknown = toolrelay("keys", "revoke", "key_nope", env=env, cwd=tmp_path)
        assert unknown.returncode == 1 and "no such API key" in unknown.stderr

        def refused_now(key: str) -> bool:
            with client(key) as c:
                return c.get("/v1/tools").status_code == 401

        wait_until(lambda: refused_now(scoped) and refused_now(other), 30, "the revoked keys to be refused")
        with client(scoped) as c:
            assert c.get("/v1/tools").json()["detail"] == "this API key was revoked"
        with client(full) as acme:
            assert acme.get("/v1/tools").status_code == 200
        states = {k["prefix"]: k["state"] for k in listed(env, tmp_path)}
        assert states == {full[:8]: "active", scoped[:8]: "revoked", other[:8]: "revoked"}
    finally:
        gateway.kill(signal.SIGTERM)


def test_purge_deletes_old_finished_receipts_in_batches_and_says_what_it_deleted(
        database: tuple[dict[str, str], Database], tmp_path: Path) -> None:
    env, db = database
    doomed = [finished(db, days=40) for _ in range(3)]
    kept = [finished(db, days=10), open_receipt(db, days=90),
            finished(db, days=0.2, finished_days=0.1, idempotency_key="retry-me", request_hash="h")]
    events = sql.value(db, "SELECT count(*) FROM receipt_events WHERE receipt_id = ANY(%(ids)s)", ids=doomed)

    done = toolrelay("purge", "--older-than", "30d", "--batch", "2", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"deleted 3 receipts, {events} timeline events, 0 webhook messages, 0 delivery attempts and 0 batches" \
        in done.stdout
    assert {row[0] for row in sql.rows(db, "SELECT id FROM receipts")} == set(kept)

    everything = toolrelay("purge", "--older-than", "0s", env=env, cwd=tmp_path)
    assert everything.returncode == 0 and "deleted 1 receipts" in everything.stdout  # the 10-day-old one
    assert {row[0] for row in sql.rows(db, "SELECT id FROM receipts")} == set(kept[1:])  # open, young key
    bad = toolrelay("purge", "--older-than", "a while", env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "not a duration" in bad.stderr
