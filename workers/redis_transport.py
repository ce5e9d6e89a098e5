"""The Redis transport of toolrelay's Celery apps: kombu's own, with one redis-py client per channel.

kombu's Redis channel builds a new ``redis.Redis`` for every operation it is not handed a client
for (``Channel.conn_or_acquire``). That includes the bookkeeping of every message a worker takes:
the message is put in the unacked hash when it is delivered and taken out again at the ack, two
clients per task. Building one copies redis-py's table of about 165 response callbacks into a
case-insensitive dict (redis/redis-py#3624), some 50 µs each time: about 15 % of the CPU a worker's
main process spent per task. A client holds no connection of its own, only the pool's (each command
checks one out), so one client per channel serves all of those operations. It is rebuilt when the
channel replaces its pool, as it does after a fork.

Only plain ``redis://`` brokers use it (:func:`broker_transport`). kombu treats ``rediss://`` and
``sentinel://`` URLs specially by their scheme name, so those keep kombu's transport unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis

TRANSPORT = f"{__name__}:Transport"


class Channel(redis.Channel):  # type: ignore[misc]
    """kombu's Redis channel, reusing one client for the operations that are not handed one."""

    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool  # a new pool after the channel dropped its old one (a fork, a failed ping)
        shared = self._shared_client
        if shared is None or shared.connection_pool is not pool:
            shared = self._shared_client = self._create_client()
        yield shared


class Transport(redis.Transport):  # type: ignore[misc]
    Channel = Channel


def broker_transport(broker_url: str) -> str | None:
    """The ``broker_transport`` setting for ``broker_url``: this transport for ``redis://``, else None
    (kombu picks by the URL's scheme)."""
    return TRANSPORT if broker_url.startswith("redis://") else None
