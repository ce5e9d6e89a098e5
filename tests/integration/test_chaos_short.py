"""The chaos script's short form: every fault at least once under load, and every figure that must be 0 is 0.

It runs ``python -m tests.chaos`` as a user runs it (its own PostgreSQL and Redis on spare ports, the
production processes through the CLI) for 40 s with a fault every couple of seconds, and
reads its ``--json`` document. A broken guarantee (a 500, a call lost or stuck, a write run twice, a
webhook undelivered or unverifiable, a process that does not come back) makes the script exit 1 and
this test fail, naming the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.faults import KINDS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DURATION_S = 40


@pytest.mark.timeout(240)
def test_a_short_chaos_run_breaks_no_guarantee(tmp_path: Path) -> None:
    document_path = tmp_path / "chaos.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.chaos", "--duration", str(DURATION_S), "--fault-every", "2",
         "--down", "1,2", "--deadlines", "10,20", "--rate", "8", "--probes", "8", "--settle", "60",
         "--json", str(document_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=220)
    output = done.stdout[-6000:] + done.stderr[-4000:]
    assert document_path.exists(), output
    document = json.loads(document_path.read_text())
    figures = document["figures"]
    assert {name: figures[name] for name in document["must_be_zero"] if figures[name] != 0} == {}, output
    assert done.returncode == 0, output
    assert document["ok"] is True
    # It measured something: calls were accepted and all of them ended; every kind of fault happened.
    assert figures["accepted"] >= DURATION_S * 8 * 0.9, output
    assert figures["ended"] == figures["accepted"]
    assert figures["webhooks_delivered"] == figures["webhooks_expected"] > figures["accepted"]
    assert set(document["faults"]) == set(KINDS), document["faults"]
    assert set(document["receiver_modes"]) - {"ok"}, document["receiver_modes"]
    assert figures["answers_503"] > 0, output  # the long outage: requests that needed PostgreSQL got 503s
