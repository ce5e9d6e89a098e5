"""A receipt read from a row is the receipt its fields make, and as frozen."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from receipts.records import RECEIPT_COLUMNS, Receipt


def row() -> tuple[object, ...]:
    at = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    values = {f.name: f"{f.name}-value" for f in dataclasses.fields(Receipt)}
    values.update(input={"n": 1}, output=[1, 2], error=None, attempt=2, max_attempts=3, metadata={"k": "v"},
                  created_at=at, updated_at=at, deadline_at=at, available_at=at, deadline_s=30.0, approval=None)
    return tuple(values[name] for name in RECEIPT_COLUMNS)


def test_a_receipt_from_a_row_equals_the_one_its_fields_make_and_ignores_later_columns() -> None:
    values = row()
    made = Receipt.from_values((*values, "before_status", 3))
    assert made == Receipt(*values)
    assert [getattr(made, name) for name in RECEIPT_COLUMNS] == list(values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.status = "success"  # type: ignore[misc]


def test_a_row_short_of_a_column_is_refused() -> None:
    with pytest.raises(TypeError, match="columns"):
        Receipt.from_values(row()[:-1])
