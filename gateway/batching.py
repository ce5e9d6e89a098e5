"""Coalescing what concurrent requests ask of the database into one statement.

Under load a gateway process serves dozens of requests at once, and much of what each costs its
event loop is per statement: a write to PostgreSQL's socket, a wake-up when the answer arrives, a
pooled connection checked out and back. A :class:`Batcher` collects what concurrent requests ask
for while its statements are in flight and sends the lot as the next one, so under load N requests
cost one round trip (and PostgreSQL commits N accepted calls at once); a request that comes alone
goes out at once, in the loop's next turn.

Nothing is weakened: each request still gets its own answer only once the statement that carries
it has committed, and a failure of that statement fails each request it carried, none else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

Run = Callable[[list[K]], Awaitable[Sequence[V | BaseException]]]


class Batcher(Generic[K, V]):
    """Runs ``run(items)`` for batches of the items awaited concurrently; call it on one event loop.

    ``run`` returns one result per item, in order: a value, or an exception raised to that item's
    caller alone. At most ``parallel`` batches are in flight (each holds a pooled connection), each
    of at most ``max_size`` items.
    """

    def __init__(self, run: Run[K, V], *, max_size: int = 64, parallel: int = 2) -> None:
        self.run = run
        self.max_size = max_size
        self.parallel = parallel
        self._queue: list[tuple[K, asyncio.Future[V]]] = []
        self._running = 0

    async def __call__(self, item: K) -> V:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[V] = loop.create_future()
        self._queue.append((item, future))
        if self._running < self.parallel:
            self._running += 1
            loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._queue[:self.max_size]
                del self._queue[:self.max_size]
                try:
                    results = await self.run([item for item, _ in batch])
                except Exception as exc:  # noqa: BLE001 - the statement failed: so did each request it carried
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():  # its request was cancelled (the client went away)
                        continue
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self._running -= 1
