"""``toolrelay dev`` on its embedded PostgreSQL: where the data lives, how it starts, stops and comes back."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psycopg

from receipts.db import Database
from tests.acceptance.test_dev import KEY, Dev, start_dev
from tests.support import services, sql
from tests.support.stack import free_port


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "pg" / "postmaster.pid").read_text().splitlines()[0])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def submit(dev: Dev, tool: str = "echo") -> str:
    with dev.client() as client:
        response = client.post("/v1/tool-calls", json={"tool": tool, "arguments": {"n": 1}, "wait_s": 10})
        assert response.status_code == 200, response.text
        return str(response.json()["id"])


def test_dev_keeps_its_data_in_a_socket_only_postgresql_it_starts_and_stops(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    dev = start_dev(tmp_path, data_dir, free_port(), "--api-key", KEY)
    try:
        log = dev.process.log()
        assert "started in" in log and "PostgreSQL 18" in log and "initdb" in log, log
        assert (data_dir / "pg" / "PG_VERSION").read_text().strip() == "18"
        receipt_id = submit(dev)
        pid = postmaster_pid(data_dir)
        socket_dir = (data_dir / "pg" / "postmaster.pid").read_text().splitlines()[4]
        with psycopg.connect(host=socket_dir, dbname="toolrelay", user="postgres") as conn:
            assert conn.execute("SHOW listen_addresses").fetchone() == ("",)  # no TCP port at all
            assert conn.execute("SELECT status FROM receipts WHERE id = %s", [receipt_id]).fetchone() == ("success",)
    finally:
        dev.process.kill(signal.SIGTERM)
    assert not alive(pid)  # dev stopped its server on the way out

    again = start_dev(tmp_path, data_dir, free_port(), "--api-key", KEY, name="dev-again")
    try:
        assert "initdb" not in again.process.log()
        with again.client() as client:
            assert client.get(f"/v1/receipts/{receipt_id}").json()["status"] == "success"
    finally:
        again.process.kill(signal.SIGTERM)


def test_a_dev_killed_with_sigkill_leaves_its_server_which_the_next_dev_reuses(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_dev(tmp_path, data_dir, free_port(), "--api-key", KEY, name="dev-first")
    try:
        receipt_id = submit(first)
        pid = postmaster_pid(data_dir)
    finally:
        first.process.kill(signal.SIGKILL)
    assert alive(pid)
    again = start_dev(tmp_path, data_dir, free_port(), "--api-key", KEY, name="dev-again")
    try:
        assert "reuse" in again.process.log(), again.process.log()
        assert postmaster_pid(data_dir) == pid
        with again.client() as client:
            assert client.get(f"/v1/receipts/{receipt_id}").json()["status"] == "success"
        submit(again)  # and the reused server takes new calls
    finally:
        again.process.kill(signal.SIGTERM)
    assert not alive(pid)


def test_with_a_database_url_dev_uses_that_database(tmp_path: Path) -> None:
    url = services.create_database(migrated=False)
    data_dir = tmp_path / "data"
    dev = start_dev(tmp_path, data_dir, free_port(), "--api-key", KEY, TOOLRELAY_DATABASE_URL=url)
    try:
        assert "TOOLRELAY_DATABASE_URL" in dev.process.log()
        receipt_id = submit(dev)
    finally:
        dev.process.kill(signal.SIGTERM)
    assert not (data_dir / "pg").exists()
    db = Database(url)
    try:
        assert sql.value(db, "SELECT status FROM receipts WHERE id = %(id)s", id=receipt_id) == "success"
    finally:
        db.dispose()
        services.drop_database(url)
