"""One real deployment for the batch tests (gateway, worker processes, beat); each test a tenant of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from receipts.tenants import create_key
from tests.support import sql
from tests.support.stack import Stack, running_stack

MAX_CALLS = 6


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("batches"), outbound_allow_cidrs="127.0.0.0/8",
                       batch_max_calls=MAX_CALLS) as running:
        yield running


@dataclass
class Tenant:
    stack: Stack
    name: str
    key: str

    def client(self) -> httpx.Client:
        return self.stack.client(self.key)

    def batch(self, format: str, message: Any, *, expect: int | None = 200, headers: dict[str, str] | None = None,
              **fields: Any) -> httpx.Response:
        with self.client() as client:
            response = client.post("/v1/batches", json={"format": format, "message": message, **fields},
                                   headers=headers or {})
        if expect is not None:
            assert response.status_code == expect, response.text
        return response

    def receipt(self, receipt_id: str) -> dict[str, Any]:
        with self.client() as client:
            return client.get(f"/v1/receipts/{receipt_id}").json()  # type: ignore[no-any-return]

    def counts(self) -> tuple[int, int]:
        """How many receipts and batches this tenant has."""
        tenant_id = sql.value(self.stack.db, "SELECT id FROM tenants WHERE name = %(name)s", name=self.name)
        return (sql.value(self.stack.db, "SELECT count(*) FROM receipts WHERE tenant_id = %(t)s", t=tenant_id),
                sql.value(self.stack.db, "SELECT count(*) FROM batches WHERE tenant_id = %(t)s", t=tenant_id))


@pytest.fixture
def tenant(stack: Stack) -> Tenant:
    name = f"batches-{uuid.uuid4().hex[:10]}"
    return Tenant(stack, name, stack.db.run(create_key(name)))
