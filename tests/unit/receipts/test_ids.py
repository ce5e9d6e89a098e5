"""Ids: ULIDs as python-ulid writes them, sorting by time and, within a process, by creation."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import pytest
from ulid import ULID

from receipts import ids
from receipts.ids import new_id, next_ulid, ulid_text


@pytest.mark.parametrize("value", [0, 1, 2**80, 2**127, 2**128 - 1, int.from_bytes(os.urandom(16), "big")])
def test_the_text_is_python_ulids(value: int) -> None:
    assert ulid_text(value) == str(ULID.from_int(value)).lower()


def test_the_text_of_ids_in_a_row_is_python_ulids_whichever_bits_they_share() -> None:
    start = int.from_bytes(os.urandom(16), "big") >> 1 | (2**30 - 3)  # its low 30 bits about to carry over
    values = [start + n for n in range(6)] + [start, start ^ 2**100, 2**30 - 1, 2**30, start]
    assert [ulid_text(v) for v in values] == [str(ULID.from_int(v)).lower() for v in values]


def test_an_id_names_its_kind_and_the_time_it_was_made() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    receipt_id = new_id("rcpt")
    prefix, _, text = receipt_id.partition("_")
    assert prefix == "rcpt" and len(text) == 26
    made = ULID.from_str(text.upper()).datetime
    assert before <= made <= datetime.now(UTC)


def test_ids_made_in_a_row_sort_in_that_order() -> None:
    made = [new_id("rcpt") for _ in range(10_000)]  # many share a millisecond
    assert made == sorted(made) and len(set(made)) == len(made)


def test_the_clock_stepping_back_keeps_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    first = next_ulid()
    monkeypatch.setattr(time, "time_ns", lambda: (first >> ids.RANDOM_BITS) * 1_000_000 - 5_000_000_000)
    assert next_ulid() > first


def test_a_used_up_millisecond_moves_to_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    now_ms = time.time_ns() // 1_000_000 + 10_000
    monkeypatch.setattr(ids, "_last", (now_ms, (1 << ids.RANDOM_BITS) - 1))
    monkeypatch.setattr(time, "time_ns", lambda: now_ms * 1_000_000)
    assert next_ulid() >> ids.RANDOM_BITS == now_ms + 1


def test_a_forked_child_does_not_continue_its_parents_sequence() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what it remembers of its parent's last id
        os.write(write, repr(ids._last).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 100) == b"(0, 0)"
