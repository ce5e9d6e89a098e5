"""A settled heap: what was alive is frozen, and garbage in reference cycles is still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from toolrelay import heap


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_settle_freezes_what_is_alive_and_raises_the_first_threshold(restored_gc: None) -> None:
    survivor = Node()
    heap.settle()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
    assert gc.is_tracked(survivor)


def test_cycles_made_after_settling_are_still_collected_without_an_explicit_collect(restored_gc: None) -> None:
    heap.settle()
    first = Node()
    first.other = Node()
    first.other.other = first
    gone = weakref.ref(first)
    del first
    keep = [[n] for n in range(3 * heap.YOUNG_THRESHOLD)]  # more new containers than the threshold
    assert gone() is None
    assert len(keep) == 3 * heap.YOUNG_THRESHOLD
