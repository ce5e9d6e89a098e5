"""The official MCP conformance suite's server scenarios against ``toolrelay dev``'s ``/mcp``.

The suite (npm ``@modelcontextprotocol/conformance``, pinned in tests/mcp/package-lock.json and
installed there by ``npm ci``, which .ci/run does) calls fixture tools by name: they are the ``@tool``
functions of tests.support.mcp_fixtures, loaded into dev with TOOLRELAY_TOOL_MODULES. Its CLI runs on
Node 20 with tests/mcp/node20/register.mjs, and reaches the authenticated endpoint with
tests/mcp/bearer.mjs (see each file for why).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_dev import Dev, start_dev
from tests.support.stack import ROOT, free_port

pytestmark = pytest.mark.acceptance

KEY = "trk_acceptance_mcp_key"
SUITE = ROOT / "tests" / "mcp"
CLI = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
SCENARIOS = ("server-initialize", "ping", "tools-list", "tools-call-simple-text", "tools-call-error",
             "tools-call-with-progress")


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    tmp = tmp_path_factory.mktemp("mcp-dev")
    running = start_dev(tmp, tmp / "data", free_port(), "--api-key", KEY, name="dev-mcp",
                        TOOLRELAY_TOOL_MODULES="tests.support.mcp_fixtures", PYTHONPATH=str(ROOT))
    try:
        yield running
    finally:
        running.process.kill(signal.SIGTERM)


def run_scenario(url: str, scenario: str, output: Path) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    assert node is not None, "the MCP conformance suite needs Node.js (20 or later) on PATH"
    assert CLI.exists(), f"the MCP conformance suite is not installed: run `npm ci` in {SUITE} (.ci/run does)"
    argv = [node, "--import", "./node20/register.mjs", "--import", "./bearer.mjs", str(CLI),
            "server", "--url", url, "--scenario", scenario, "--output-dir", str(output)]
    env = {**os.environ, "MCP_BEARER_TOKEN": KEY, "MCP_SERVER_URL": url, "NO_COLOR": "1"}
    return subprocess.run(argv, cwd=SUITE, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_conformance_scenario_passes(dev: Dev, scenario: str, tmp_path: Path) -> None:
    run = run_scenario(f"{dev.base_url}/mcp", scenario, tmp_path)
    report = f"exit {run.returncode}\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    found = list(tmp_path.glob("*/checks.json"))
    assert len(found) == 1, report
    checks = json.loads(found[0].read_text())
    assert run.returncode == 0, report
    assert [c["status"] for c in checks if c["id"] == scenario] == ["SUCCESS"], report
    assert not [c for c in checks if c["status"] == "FAILURE"], report
