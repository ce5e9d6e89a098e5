"""The cyclic garbage collector, set for a long-running server process.

Once it has imported FastAPI, Celery, pydantic and the rest, a toolrelay process holds a few hundred
thousand objects that live as long as it does, and CPython's collector walks every one of them in
each full (generation 2) collection: 20-150 ms with everything stopped, every few thousand requests
under load (objects alive in requests in flight get promoted, then die old), which was most of the
gateway's p99 and several per cent of its CPU. Two standard remedies, both kept from start-up on:

* :func:`gc.freeze` once start-up is done: what is alive then moves to a generation the collector
  never walks (a Celery pool child settles its own heap once it is set up after its fork);
* a first threshold of :data:`YOUNG_THRESHOLD` instead of 700: a request frees what it allocated,
  so the count of new containers rarely reaches it, and garbage in reference cycles is still
  collected once that many more containers are alive than at the last collection (a few MiB at most).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Freeze what is alive now, and collect the young generation less often. Call it when start-up is
    done (again after a fork, or after more start-up): it is cheap to repeat."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
