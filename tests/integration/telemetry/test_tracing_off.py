"""With no OTEL_* variable set, nothing is recorded, and a caller's trace context still passes through."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from tests.integration.telemetry.conftest import api_tool, define, submit
from tests.support.stack import Stack, running_stack
from tests.support.upstreams import Reply, Upstream


@pytest.fixture(scope="module")
def plain_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("untraced"), beat=False, outbound_allow_cidrs="127.0.0.0/8",
                       env={"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}) as running:
        yield running


def test_without_tracing_the_callers_traceparent_reaches_the_upstream_unchanged(plain_stack: Stack,
                                                                                upstream: Upstream) -> None:
    upstream.route("/untraced", Reply(json={"ok": True}))
    header = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    with plain_stack.client() as client:
        define(client, api_tool(upstream, "untraced_get", "/untraced"))
        receipt = plain_stack.wait_terminal(submit(client, "untraced_get", headers={"traceparent": header})["id"])
        assert receipt["status"] == "success", receipt
        bare = plain_stack.wait_terminal(submit(client, "untraced_get")["id"])
        assert bare["status"] == "success", bare
        malformed = plain_stack.wait_terminal(submit(client, "untraced_get", headers={"traceparent": "junk"})["id"])
        assert malformed["status"] == "success", malformed
    first, second, third = upstream.requests_to("/untraced")
    assert first.headers["traceparent"] == header  # no span of ours in between: the caller's, as it came
    assert "traceparent" not in second.headers and "traceparent" not in third.headers  # nothing to continue
    assert "tracing on" not in plain_stack.logs()
