"""Two gateway processes share each key's rate limit through Redis; over it, 429 and nothing stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from receipts.catalogue import tools as catalogue
from receipts.records import ToolSpec
from tests.support import sql
from tests.support.stack import Stack, free_port, wait_serving

pytestmark = pytest.mark.integration

BURST = 6


@pytest.fixture
def two_gateways(tmp_path: Path) -> Iterator[tuple[Stack, str]]:
    """Two gateways on one database and Redis (no worker: nothing here needs to run)."""
    # 0.001 requests/s: no token comes back while the test runs, so the counts are exact.
    stack = Stack(tmp_path, rate_limit_per_s="0.001", rate_limit_burst=str(BURST))
    try:
        stack.start_gateway()
        port = free_port()
        second = stack.run("gateway2", "gateway", "--port", str(port))
        wait_serving(second, f"http://127.0.0.1:{port}")
        yield stack, f"http://127.0.0.1:{port}"
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.close()


def test_every_gateway_draws_on_the_same_bucket(two_gateways: tuple[Stack, str]) -> None:
    stack, second_url = two_gateways
    # A tool in the catalogue, as a worker would publish it (none runs here: accepted calls stay pending).
    stack.db.run(catalogue.publish([ToolSpec(name="note", kind="python", description="Takes a note.",
                                             parameters={"type": "object"})]))
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    answers = []
    with httpx.Client(headers=headers, timeout=30) as client:
        for i in range(BURST + 4):
            base = stack.base_url if i % 2 == 0 else second_url
            answers.append(client.post(f"{base}/v1/tool-calls", json={"tool": "note", "arguments": {"i": i}}))
    statuses = [answer.status_code for answer in answers]
    assert statuses[:BURST] == [202] * BURST, statuses
    assert statuses[BURST:] == [429] * 4
    for refused in answers[BURST:]:
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert int(refused.headers["retry-after"]) >= 900
        assert refused.json()["status"] == 429
    assert sql.value(stack.db, "SELECT count(*) FROM receipts") == BURST  # the refused ones stored nothing
    # Each key has its own bucket, whichever gateway it reaches.
    with httpx.Client(headers={"Authorization": f"Bearer {stack.other_key}"}, timeout=30) as other:
        assert other.get(f"{second_url}/v1/tools").status_code == 200
        assert other.get(f"{stack.base_url}/v1/tools").status_code == 200
