"""The pipeline end to end on PostgreSQL, Redis and real worker processes."""

from __future__ import annotations

from tests.support.stack import Stack


def test_echo_call_succeeds_with_its_arguments_as_output(stack: Stack) -> None:
    with stack.client() as client:
        response = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"x": 1}})
        assert response.status_code == 202
        receipt = response.json()
        assert receipt["status"] == "pending"
    final = stack.wait_terminal(receipt["id"])
    assert final["status"] == "success"
    assert final["output"] == {"x": 1}
