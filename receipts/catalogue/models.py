"""Models a tenant's runs may call: an OpenAI-compatible Chat Completions endpoint each, by name.

The API key is encrypted at rest with the secret box (``TOOLRELAY_SECRET_KEY``) and never shown: the
API says only whether one is set. Only the worker that calls the model decrypts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from receipts.db import Query, Steps, operation
from receipts.errors import NotFound
from receipts.records import iso
from receipts.secretbox import SecretBox

_COLUMNS = "tenant_id, name, base_url, model, api_key, params, created_at, updated_at"
# An api_key left out keeps the stored one; given (a token or NULL) it replaces it.
PUT = f"""
INSERT INTO models ({_COLUMNS})
VALUES (%(tenant_id)s, %(name)s, %(base_url)s, %(model)s, %(api_key)s, %(params)s, now(), now())
ON CONFLICT (tenant_id, name) DO UPDATE SET base_url = excluded.base_url, model = excluded.model,
    params = excluded.params, updated_at = now(),
    api_key = CASE WHEN %(keep_key)s THEN models.api_key ELSE excluded.api_key END
RETURNING {_COLUMNS}"""
GET = f"SELECT {_COLUMNS} FROM models WHERE tenant_id = %(tenant_id)s AND name = %(name)s"
LIST = f"SELECT {_COLUMNS} FROM models WHERE tenant_id = %(tenant_id)s ORDER BY name"
DELETE = "DELETE FROM models WHERE tenant_id = %(tenant_id)s AND name = %(name)s"


@dataclass(frozen=True, slots=True)
class Model:
    """A model definition; ``api_key`` is the encrypted token (or None)."""

    tenant_id: str
    name: str
    base_url: str
    model: str
    api_key: str | None
    params: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    def to_api(self) -> dict[str, Any]:
        return {"name": self.name, "base_url": self.base_url, "model": self.model, "params": self.params,
                "api_key_set": self.api_key is not None, "created_at": iso(self.created_at),
                "updated_at": iso(self.updated_at)}


class Models:
    """The operations that need the secret box."""

    def __init__(self, box: SecretBox | Callable[[], SecretBox]) -> None:
        self._box = box

    @property
    def box(self) -> SecretBox:
        if not isinstance(self._box, SecretBox):
            self._box = self._box()  # SecretKeyMissing when TOOLRELAY_SECRET_KEY is not set
        return self._box

    @operation
    def put(self, tenant_id: str, name: str, *, base_url: str, model: str, params: dict[str, Any],
            api_key: str | None = None, keep_key: bool = False) -> Steps[Model]:
        """Define or replace model ``name``. ``keep_key``: the request left the key out, so keep the stored one."""
        token = None if api_key is None else self.box.encrypt(api_key)
        row = yield Query(PUT, {"tenant_id": tenant_id, "name": name, "base_url": base_url, "model": model,
                                "api_key": token, "params": Jsonb(params), "keep_key": keep_key})
        return Model(*row)

    def api_key(self, model: Model) -> str | None:
        """The model's API key in clear (SecretUnreadable if it was encrypted with another secret key)."""
        return None if model.api_key is None else self.box.decrypt(model.api_key)


@operation
def get(tenant_id: str, name: str) -> Steps[Model]:
    """A tenant's model. Raises NotFound."""
    row = yield Query(GET, {"tenant_id": tenant_id, "name": name})
    if row is None:
        raise NotFound(f"no model named {name!r}; define it with PUT /v1/models/{name}")
    return Model(*row)


@operation
def list_models(tenant_id: str) -> Steps[list[Model]]:
    return [Model(*row) for row in (yield Query(LIST, {"tenant_id": tenant_id}, fetch="all"))]


@operation
def delete(tenant_id: str, name: str) -> Steps[None]:
    """Forget a model (runs already accepted keep its name and fail if it is gone when they call it)."""
    if (yield Query(DELETE, {"tenant_id": tenant_id, "name": name}, fetch="rowcount")) == 0:
        raise NotFound(f"no model named {name!r}")
