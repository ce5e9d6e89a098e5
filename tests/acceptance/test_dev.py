"""``toolrelay dev``: the whole system in one process, driven over HTTP like the README's curl flow."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.conftest import clean_env, serving, start, wait_until
from tests.support.stack import ROOT, TERMINAL, Process, free_port
from tests.support.tools import count_effects

KEY = "trk_acceptance_dev_key"


@dataclass
class Dev:
    process: Process
    base_url: str
    data_dir: Path

    def client(self, key: str = KEY) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=70)


def start_dev(tmp: Path, data_dir: Path, port: int, *args: str, name: str = "dev", **env: str) -> Dev:
    process = start(name, "dev", "--port", str(port), "--data-dir", str(data_dir), *args,
                    env=clean_env(**env), cwd=tmp)
    base_url = f"http://127.0.0.1:{port}"
    wait_until(serving(base_url), 60, "toolrelay dev to serve", process)
    return Dev(process, base_url, data_dir)


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Dev]:
    running = start_dev(tmp_path, tmp_path / "data", free_port(), "--api-key", KEY)
    try:
        yield running
    finally:
        running.process.kill(signal.SIGTERM)


def wait_all_terminal(dev: Dev, ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    final: dict[str, dict[str, Any]] = {}

    def settled() -> bool:
        with dev.client() as client:
            for rid in ids:
                if rid not in final:
                    body = client.get(f"/v1/receipts/{rid}").json()
                    if body["status"] in TERMINAL:
                        final[rid] = body
        return len(final) == len(ids)

    wait_until(settled, timeout, "every accepted call to reach a terminal state", dev.process)
    return final


def test_the_readme_curl_flow(dev: Dev) -> None:
    assert f"toolrelay dev: {dev.base_url}" in dev.process.log()
    assert f"API key: {KEY}" in dev.process.log()
    with dev.client() as client:
        # curl -H "Authorization: Bearer $KEY" -d '{"tool":"echo","arguments":{"x":1}}' .../v1/tool-calls
        accepted = client.post("/v1/tool-calls", content=b'{"tool":"echo","arguments":{"x":1}}',
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert accepted.status_code == 202, accepted.text
        assert accepted.json()["status"] == "pending"
        receipt = client.get(f"/v1/receipts/{accepted.json()['id']}", params={"wait_s": 5}).json()
        assert receipt["status"] == "success"
        assert receipt["output"] == {"x": 1}

        waited = client.post("/v1/tool-calls", json={"tool": "calculate", "arguments": {"expression": "2 ** 10"},
                                                     "wait_s": 5})
        assert waited.status_code == 200
        assert waited.json()["output"] == {"result": 1024}

        invalid = client.post("/v1/tool-calls", json={"tool": "sleep", "arguments": {"seconds": "long"}})
        assert invalid.status_code == 422
        assert invalid.json()["errors"][0]["field"] == "arguments.seconds"
        assert client.get("/v1/receipts", params={"tool": "sleep"}).json()["data"] == []

        names = {t["name"] for t in client.get("/v1/tools").json()["data"]}
        assert {"echo", "sleep", "calculate", "current_time"} <= names
    with dev.client("trk_wrong") as intruder:
        assert intruder.get(f"/v1/receipts/{accepted.json()['id']}").status_code == 401
    assert httpx.get(f"{dev.base_url}/openapi.json", timeout=10).status_code == 200


def test_a_second_dev_process_on_the_same_data_dir_is_refused(dev: Dev, tmp_path: Path) -> None:
    second = start("dev2", "dev", "--port", str(free_port()), "--data-dir", str(dev.data_dir),
                   env=clean_env(), cwd=tmp_path)
    assert second.popen.wait(60) != 0
    assert "another toolrelay dev process" in second.log()
    second.kill()


def test_without_api_key_one_is_made_printed_and_remembered(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    first = start_dev(tmp_path, data_dir, port, name="dev-first")
    try:
        key = next(line.split("API key: ", 1)[1].strip() for line in first.process.log().splitlines()
                   if "API key: " in line)
        assert key.startswith("trk_")
        with first.client(key) as client:
            assert client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {}}).status_code == 202
    finally:
        first.process.kill(signal.SIGTERM)
    again = start_dev(tmp_path, data_dir, port, name="dev-again")
    try:
        assert f"API key: {key}" in again.process.log()
        with again.client(key) as client:
            assert client.get("/v1/receipts").json()["data"] != []
    finally:
        again.process.kill(signal.SIGTERM)


def test_killed_with_sigkill_and_restarted_every_accepted_call_settles(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    effects = tmp_path / "effects"
    port = free_port()
    env = {"TOOLRELAY_TOOL_MODULES": "tests.support.tools", "PYTHONPATH": str(ROOT),
           "TOOLRELAY_TEST_EFFECTS": str(effects), "TOOLRELAY_SWEEP_INTERVAL_S": "0.5"}
    first = start_dev(tmp_path, data_dir, port, "--api-key", KEY, name="dev-first", **env)
    ids: dict[str, str] = {}
    try:
        with first.client() as client:
            def call(name: str, tool: str, arguments: dict[str, Any]) -> None:
                response = client.post("/v1/tool-calls", json={"tool": tool, "arguments": arguments})
                assert response.status_code == 202, response.text
                ids[name] = response.json()["id"]

            call("write", "short_write", {"tag": "write", "seconds": 4})
            for i in range(8):  # with the write, more than the 8 worker threads: some wait in the queue
                call(f"sleep{i}", "sleep", {"seconds": 4})
            for i in range(5):
                call(f"echo{i}", "echo", {"i": i})
            wait_until(lambda: count_effects(effects, "write", "start") == 1, 30, "the write to start", first.process)
            running = client.get("/v1/receipts", params={"status": "running", "limit": 200}).json()["data"]
            pending = client.get("/v1/receipts", params={"status": "pending", "limit": 200}).json()["data"]
            assert running and pending  # calls in flight and calls still queued when the process dies
    finally:
        first.process.kill(signal.SIGKILL)
    assert count_effects(effects, "write", "done") == 0

    again = start_dev(tmp_path, data_dir, port, "--api-key", KEY, name="dev-again", **env)
    try:
        final = wait_all_terminal(again, list(ids.values()), timeout=90)
    finally:
        again.process.kill(signal.SIGTERM)

    by_name = {name: final[rid] for name, rid in ids.items()}
    for name, receipt in by_name.items():
        if name == "write":
            continue
        assert receipt["status"] == "success", (name, receipt)
    assert {by_name[f"echo{i}"]["output"]["i"] for i in range(5)} == set(range(5))
    rerun = [name for name, receipt in by_name.items() if name.startswith("sleep") and receipt["attempt"] == 2]
    assert rerun  # the sleeps that were running when the process died ran again after the restart
    assert by_name["write"]["status"] == "failed"
    assert by_name["write"]["error"]["code"] == "outcome_unknown"
    assert count_effects(effects, "write", "start") == 1  # never run twice
    assert count_effects(effects, "write", "done") == 0
