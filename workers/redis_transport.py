"""The Redis transport of toolrelay's Celery apps: kombu's own, with cheaper bookkeeping per message.

A worker's main process hands every message to a pool child and is on each task's critical path, so
what it spends per message bounds the worker. kombu's Redis transport spends more than it needs to,
in two places, and this transport changes only those two:

- **One redis-py client per channel.** kombu builds a new ``redis.Redis`` for every operation it is
  not handed a client for (``Channel.conn_or_acquire``). Building one copies redis-py's table of
  about 165 response callbacks into a case-insensitive dict (redis/redis-py#3624), some 50 µs each
  time. A client holds no connection of its own, only the pool's (each command checks one out), so
  one client per channel serves all of those operations.
- **The unacked bookkeeping on a connection of its own, sent as packed commands.** A message is put
  in the unacked hash and index when it is delivered (``QoS.append``) and taken out at its ack
  (``QoS.ack``): the same commands as kombu's, in the same MULTI/EXEC transaction. What is left out
  is what a redis-py pipeline and a pool checkout cost around them (a pipeline object, a check of the
  connection with a syscall, response callbacks), about 60 µs per operation.

Both are rebuilt when the channel replaces its pool, as it does after a fork. Only plain
``redis://`` brokers use this transport (:func:`broker_transport`). kombu treats ``rediss://`` and
``sentinel://`` URLs specially by their scheme name, so those keep kombu's transport unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from time import time
from typing import Any

from kombu.transport import redis, virtual
from kombu.utils.json import dumps
from redis import exceptions as redis_errors

TRANSPORT = f"{__name__}:Transport"


class QoS(redis.QoS):  # type: ignore[misc]
    """kombu's Redis QoS, with the unacked bookkeeping of each message sent as one packed transaction."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()  # the connection is one socket; a thread pool may ack from its threads
        self._pool: Any = None
        self._connection: Any = None

    def append(self, message: Any, delivery_tag: str) -> None:
        delivery = message.delivery_info
        entry = dumps([message._raw, delivery["exchange"], delivery["routing_key"]])
        self._transaction([("ZADD", self.unacked_index_key, time(), delivery_tag),
                           ("HSET", self.unacked_key, delivery_tag, entry)])
        virtual.QoS.append(self, message, delivery_tag)

    def ack(self, delivery_tag: str) -> None:
        self._transaction([("ZREM", self.unacked_index_key, delivery_tag), ("HDEL", self.unacked_key, delivery_tag)])
        virtual.QoS.ack(self, delivery_tag)

    def _transaction(self, commands: Sequence[tuple[Any, ...]]) -> None:
        """``commands`` (on keys without the global prefix) in one MULTI/EXEC: one write, one round trip.

        A connection Redis dropped meanwhile (a restart, an idle timeout) fails the first try, which a
        pool would have caught at checkout: it is tried once more on a new connection, as the pool
        does. The commands are idempotent, so a transaction that did run before its reply was lost
        may run twice. Any error leaves the connection closed, so no reply is ever left unread on it.
        """
        prefix = self.channel.global_keyprefix
        packed_commands = [("MULTI",), *((name, prefix + key, *args) for name, key, *args in commands), ("EXEC",)]
        with self._lock:
            conn = self._connection_of(self.channel.pool)

            def send() -> list[Any]:
                conn.send_packed_command(conn.pack_commands(packed_commands))
                replies = [conn.read_response() for _ in packed_commands]  # an error reply raises
                return replies[-1]  # EXEC's: one reply per command, an error as an exception object

            try:
                try:
                    results = send()
                except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError):
                    conn.disconnect()
                    results = send()
            except BaseException:
                conn.disconnect()
                raise
        failed = [result for result in results if isinstance(result, Exception)]
        if failed:
            raise failed[0]

    def _connection_of(self, pool: Any) -> Any:
        if self._pool is not pool:  # a new pool: after a fork, or after the channel dropped a broken one
            # Checked out for good: the pool counts it in use, so closing the pool closes it too.
            self._pool, self._connection = pool, pool.get_connection()
        return self._connection


class Channel(redis.Channel):  # type: ignore[misc]
    """kombu's Redis channel, reusing one client for the operations that are not handed one."""

    QoS = QoS
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
