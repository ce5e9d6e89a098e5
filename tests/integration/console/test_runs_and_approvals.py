"""The runs and approvals pages on a real deployment: calls that wait for a person, decided in the
browser; agent runs (against a scripted Chat Completions server) listed, each with its steps; a run
that waits for an approval and goes on once it is given on the approvals page.

Each test works in a tenant of its own, so what it lists is what it made.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from receipts.tenants import create_key
from tests.integration.console.conftest import Scenario, sign_in
from tests.support.browser import screenshot
from tests.support.model_server import ModelServer, call, say
from tests.support.tools import count_effects

pytestmark = pytest.mark.integration

RUN_TERMINAL = {"success", "failed", "canceled"}


@dataclass(frozen=True)
class Tenant:
    """A tenant of its own, with the model ``scripted`` defined on the scripted server as ``model``."""

    scenario: Scenario
    models: ModelServer
    key: str
    model: str

    def client(self) -> httpx.Client:
        return self.scenario.stack.client(self.key)

    def submit(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        with self.client() as client:
            response = client.post("/v1/tool-calls", json={"tool": tool, "arguments": arguments})
        assert response.status_code == 202, response.text
        return response.json()  # type: ignore[no-any-return]

    def get(self, path: str, **params: Any) -> Any:
        with self.client() as client:
            response = client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def start_run(self, tools: list[str], **fields: Any) -> dict[str, Any]:
        with self.client() as client:
            response = client.post("/v1/runs", json={"model": "scripted", "input": "Do the task.", "tools": tools,
                                                     **fields})
        assert response.status_code in (200, 202), response.text
        return response.json()  # type: ignore[no-any-return]

    def wait_run(self, run_id: str, until: set[str] = RUN_TERMINAL, timeout: float = 60) -> dict[str, Any]:
        """The run once its status is in ``until`` (it is returned as last seen if that never happens)."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(f"/v1/runs/{run_id}", wait_s=5)
            if run["status"] in until or time.monotonic() > deadline:
                return run  # type: ignore[no-any-return]
            time.sleep(0.1)  # a waiting run answers the long-poll at once


def tenant(scenario: Scenario, models: ModelServer, name: str) -> Tenant:
    key = scenario.stack.db.run(create_key(f"{name}-{uuid.uuid4().hex[:8]}"))
    model = f"model-{uuid.uuid4().hex[:10]}"
    with scenario.stack.client(key) as client:
        defined = client.put("/v1/models/scripted", json={"base_url": models.url, "model": model})
        assert defined.status_code == 200, defined.text
    return Tenant(scenario, models, key, model)


def open_hash(page: Page, fragment: str) -> None:
    page.evaluate(f"location.hash = {fragment!r}")


def test_calls_waiting_for_approval_are_approved_and_rejected_from_the_approvals_page(
        page: Page, scenario: Scenario, models: ModelServer) -> None:
    ops = tenant(scenario, models, "approvals")
    effects = scenario.stack.effects
    kept, refused = f"kept-{uuid.uuid4().hex[:8]}", f"refused-{uuid.uuid4().hex[:8]}"
    approved = ops.submit("guarded_write", {"tag": kept})
    rejected = ops.submit("guarded_write", {"tag": refused})
    assert [r["approval"]["state"] for r in (approved, rejected)] == ["requested", "requested"]

    sign_in(page, scenario, key=ops.key)
    page.locator("[data-nav=approvals]").click()
    table = page.locator("[data-testid=approvals]")
    expect(table.locator("[data-receipt-id]")).to_have_count(2)
    row = table.locator(f"[data-receipt-id={approved['id']}]")
    expect(row.locator("[data-approval-state=requested]")).to_contain_text("expires")
    screenshot(page, "approvals")

    row.locator("[data-action=approve]").click()
    expect(row.locator("[role=alert]")).to_contain_text("Say who decides")
    row.locator("input[name=by]").fill("ana")
    row.locator("input[name=note]").fill("ok to go")
    row.locator("[data-action=approve]").click()
    notice = page.locator("[data-testid=notice]")
    expect(notice).to_contain_text(f"Approved by ana: {approved['id']} (guarded_write), it runs now")
    expect(table.locator("[data-receipt-id]")).to_have_count(1)
    done = scenario.stack.wait_terminal(approved["id"], key=ops.key)
    assert (done["status"], done["output"]) == ("success", {"written": kept})
    assert (done["approval"]["state"], done["approval"]["by"], done["approval"]["comment"]) == (
        "approved", "ana", "ok to go")
    assert count_effects(effects, kept, "ran") == 1

    row = table.locator(f"[data-receipt-id={rejected['id']}]")
    row.locator("input[name=by]").fill("bo")
    row.locator("input[name=note]").fill("too risky")
    row.locator("[data-action=reject]").click()
    expect(notice).to_contain_text(f"Rejected by bo: {rejected['id']} (guarded_write), it ended failed")
    expect(page.locator("[data-testid=approvals-empty]")).to_be_visible()
    ended = ops.get(f"/v1/receipts/{rejected['id']}")
    assert (ended["status"], ended["error"]["code"], ended["approval"]["state"]) == ("failed", "rejected", "rejected")
    assert count_effects(effects, refused) == 0

    # The approved call's page: the decision on its timeline, with who took it, then the run of the call.
    events = ops.get(f"/v1/receipts/{approved['id']}/events")["data"]
    assert [e["to_status"] for e in events] == ["waiting", "pending", "running", "success"]
    open_hash(page, f"#/receipts/{approved['id']}")
    timeline = page.locator("[data-testid=timeline]")
    markers = timeline.locator("[data-event]")
    expect(markers).to_have_count(len(events))
    assert [markers.nth(i).get_attribute("data-event") for i in range(len(events))] == [e["to_status"] for e in events]
    decision = timeline.locator("[data-decision]")
    expect(decision).to_have_count(1)
    expect(decision).to_have_attribute("data-decision", "approved")
    expect(decision).to_have_attribute("data-actor", "person:ana")
    expect(decision).to_have_attribute("data-event", "pending")
    expect(decision).to_contain_text("approved by ana")
    expect(page.locator("dl.facts [data-approval-state=approved]")).to_contain_text("approved by ana")
    expect(page.locator("dl.facts [data-approval-state=approved]")).to_contain_text("ok to go")
    expect(page.locator("[data-action=approve]")).to_have_count(0)
    screenshot(page, "receipt-approved")

    # The rejected one: failed with rejected, the decision by bo on its timeline, never run.
    open_hash(page, f"#/receipts/{rejected['id']}")
    expect(page.locator("[data-testid=receipt-error]")).to_contain_text("rejected: rejected by bo: too risky")
    decision = page.locator("[data-testid=timeline] [data-decision]")
    expect(decision).to_have_attribute("data-decision", "rejected")
    expect(decision).to_have_attribute("data-actor", "person:bo")
    expect(decision).to_contain_text("rejected by bo")
    expect(page.locator("[data-testid=timeline] [data-attempt]")).to_have_count(0)


def test_the_runs_list_and_a_runs_steps_in_order_with_its_receipts(
        page: Page, scenario: Scenario, models: ModelServer) -> None:
    agent = tenant(scenario, models, "runs")
    models.script(agent.model, call(("call_1", "calculate", {"expression": "6 * 7"}), ("call_2", "current_time", {})),
                  say("6 × 7 = 42."))
    answered = agent.wait_run(agent.start_run(["calculate"])["id"])
    assert (answered["status"], answered["output"]) == ("success", "6 × 7 = 42."), answered
    models.script(agent.model, call(("call_3", "calculate", {"expression": "1 + 1"})))
    stopped = agent.wait_run(agent.start_run(["calculate"], max_iterations=1)["id"])
    assert (stopped["status"], stopped["error"]["code"]) == ("failed", "max_iterations"), stopped
    steps = answered["steps"]
    assert [s["kind"] for s in steps] == ["model", "tools", "model"]
    (receipt_id,) = steps[1]["receipts"]  # current_time is not offered: refused, no receipt

    sign_in(page, scenario, key=agent.key)
    page.locator("[data-nav=runs]").click()
    rows = page.locator("[data-testid=runs] [data-run-id]")
    expect(rows).to_have_count(2)
    assert [rows.nth(i).get_attribute("data-run-id") for i in range(2)] == [stopped["id"], answered["id"]]
    expect(page.locator(f"[data-run-id={answered['id']}]")).to_have_attribute("data-status", "success")
    expect(page.locator(f"[data-run-id={answered['id']}]")).to_contain_text("6 × 7 = 42.")
    expect(page.locator(f"[data-run-id={stopped['id']}]")).to_contain_text("max_iterations")
    screenshot(page, "runs")
    page.locator("[data-quick=failed]").click()
    expect(rows).to_have_count(1)
    expect(page.locator(f"[data-run-id={stopped['id']}]")).to_be_visible()
    page.locator("[data-quick=all]").click()
    expect(rows).to_have_count(2)

    page.locator(f"[data-run-id={answered['id']}]").click()
    shown = page.locator("[data-testid=steps] > li")
    expect(shown).to_have_count(3)
    assert [(shown.nth(i).get_attribute("data-step"), shown.nth(i).get_attribute("data-kind")) for i in range(3)] == \
        [(str(s["index"]), s["kind"]) for s in steps]
    expect(shown.nth(0).locator("[data-call-id]")).to_have_count(2)
    tool_step = shown.nth(1)
    calls = tool_step.locator("tr[data-call-id]")
    expect(calls).to_have_count(2)
    assert [calls.nth(i).get_attribute("data-call-id") for i in range(2)] == ["call_1", "call_2"]
    expect(calls.nth(0)).to_contain_text("calculate")
    expect(calls.nth(0)).to_contain_text("success")
    expect(calls.nth(0)).to_contain_text(steps[1]["messages"][0]["content"][:20])
    expect(calls.nth(1)).to_contain_text("refused")
    expect(page.locator("[data-testid=answer]")).to_have_text("6 × 7 = 42.")
    screenshot(page, "run")

    tool_step.locator(f"[data-receipt-link={receipt_id}]").click()
    expect(page.locator("#view h1")).to_contain_text(receipt_id)
    expect(page.locator("dl.facts")).to_contain_text(answered["id"])
    expect(page.locator("[data-testid=timeline] [data-event]")).to_have_count(3)
    page.locator(f"dl.facts a[href='#/runs/{answered['id']}']").click()  # and back to the run
    expect(page.locator("[data-testid=steps] > li")).to_have_count(3)


def test_a_run_waiting_for_an_approval_goes_on_once_it_is_approved_on_the_approvals_page(
        page: Page, scenario: Scenario, models: ModelServer) -> None:
    agent = tenant(scenario, models, "waiting-run")
    tag = f"run-{uuid.uuid4().hex[:8]}"
    models.script(agent.model, call(("call_w", "guarded_write", {"tag": tag})), say("Written."))
    run = agent.wait_run(agent.start_run(["guarded_write"])["id"], until={"waiting"} | RUN_TERMINAL)
    assert run["status"] == "waiting", run
    (receipt_id,) = run["steps"][-1]["receipts"]
    assert count_effects(scenario.stack.effects, tag) == 0

    sign_in(page, scenario, key=agent.key)
    page.locator("[data-nav=runs]").click()
    row = page.locator(f"[data-run-id={run['id']}]")
    expect(row).to_have_attribute("data-status", "waiting")
    expect(row.locator(".badge")).to_have_text("waiting")
    row.click()
    waiting = page.locator("[data-testid=run-waiting]")
    expect(waiting).to_contain_text("guarded_write")
    expect(page.locator("[data-testid=steps] > li")).to_have_count(2)
    expect(page.locator("[data-kind=tools] tr[data-call-id=call_w]")).to_contain_text("waiting")
    screenshot(page, "run-waiting")
    waiting.locator("[data-testid=to-approvals]").click()

    decide = page.locator(f"[data-testid=approvals] [data-receipt-id={receipt_id}]")
    expect(decide.locator(f"[data-run-link={run['id']}]")).to_be_visible()
    decide.locator("input[name=by]").fill("ana")
    decide.locator("[data-action=approve]").click()
    notice = page.locator("[data-testid=notice]")
    expect(notice).to_contain_text(f"and its run {run['id']} goes on")

    ended = agent.wait_run(run["id"])
    assert (ended["status"], ended["output"]) == ("success", "Written."), ended
    assert count_effects(scenario.stack.effects, tag, "ran") == 1
    notice.locator(f"a[href='#/runs/{run['id']}']").click()
    expect(page.locator("#view h1 .badge")).to_have_text("success")
    expect(page.locator("[data-testid=steps] > li")).to_have_count(3)
    expect(page.locator("[data-testid=answer]")).to_have_text("Written.")
    expect(page.locator("[data-testid=run-waiting]")).to_have_count(0)
