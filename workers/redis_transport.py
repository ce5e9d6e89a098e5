"""The Redis transport of toolrelay's Celery apps: kombu's own, with cheaper bookkeeping per message.

A worker's main process hands every message to a pool child and is on each task's critical path, so
what it spends per message bounds the worker. kombu's Redis transport spends more than it needs to,
in two places, and this transport changes only those two:

- **One redis-py client per channel.** kombu builds a new ``redis.Redis`` for every operation it is
  not handed a client for (``Channel.conn_or_acquire``). Building one copies redis-py's table of
  about 165 response callbacks into a case-insensitive dict (redis/redis-py#3624), some 50 µs each
  time. A client holds no connection of its own, only the pool's (each command checks one out), so
  one client per channel serves all of those operations.
- **The unacked bookkeeping on a connection of its own, sent as packed commands, its reply read
  later.** A message is put in the unacked hash and index when it is delivered (``QoS.append``) and
  taken out at its ack (``QoS.ack``): the same commands as kombu's, in the same MULTI/EXEC
  transaction. kombu builds a redis-py pipeline and checks a connection out of the pool for each
  (a pipeline object, a syscall to check the connection, response callbacks), then waits for the
  reply: under load some 200-300 µs per transaction, two per message, in which the worker's loop
  hands no task to a pool child. Here each transaction's reply is read once the next one is
  written, when it has long arrived. See :class:`QoS` for why that keeps kombu's guarantees.

Both are rebuilt when the channel replaces its pool, as it does after a fork. And two fixes for
a channel that Redis went away under, where kombu raises an ``AttributeError`` that ends the worker:
once its transport is detached from its connection it closes without restoring its unacked messages
(:meth:`Channel.close`), and an ack or any other command that comes to it afterwards is a connection
error (:meth:`Channel.reachable_pool`), which kombu logs and goes on. Only plain
``redis://`` brokers use this transport (:func:`broker_transport`). kombu treats ``rediss://`` and
``sentinel://`` URLs specially by their scheme name, so those keep kombu's transport unchanged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from time import time
from typing import Any

from kombu.transport import redis, virtual
from kombu.utils.json import dumps
from redis import exceptions as redis_errors

TRANSPORT = f"{__name__}:Transport"

log = logging.getLogger(__name__)


class QoS(redis.QoS):  # type: ignore[misc]
    """kombu's Redis QoS, with the unacked bookkeeping of each message sent as one packed transaction.

    A transaction is written without waiting for its reply, which is read once the next one is
    written: by then it has long arrived, so the worker's loop never sits waiting on Redis for its
    bookkeeping. Redis applies what one connection sends in order. What touches the unacked keys on
    other connections (kombu's restores and rejects) first reads every reply outstanding here, so
    Redis has applied all of it before. A transaction whose reply was lost with its connection is
    sent again on a new one: every command in them is idempotent. One that never lands (the process
    died with the network down) leaves what kombu's failed ack or entry leaves: a message Redis
    redelivers after the visibility timeout, which the claim drops as its receipt has moved on, or a
    message with no entry, whose receipt the sweeper recovers (publishing it again while it is
    pending, reclaiming its lease while it is running).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()  # the connection is one socket; a thread pool may ack from its threads
        self._pool: Any = None
        self._connection: Any = None
        self._unconfirmed: list[list[tuple[Any, ...]]] = []  # transactions whose reply is not read yet, in order
        self._written = 0  # how many of them the current connection carried

    def append(self, message: Any, delivery_tag: str) -> None:
        delivery = message.delivery_info
        entry = dumps([message._raw, delivery["exchange"], delivery["routing_key"]])
        self._exchange(self._transaction([("ZADD", self.unacked_index_key, time(), delivery_tag),
                                          ("HSET", self.unacked_key, delivery_tag, entry)]))
        virtual.QoS.append(self, message, delivery_tag)

    def ack(self, delivery_tag: str) -> None:
        self._exchange(self._transaction([("ZREM", self.unacked_index_key, delivery_tag),
                                          ("HDEL", self.unacked_key, delivery_tag)]))
        virtual.QoS.ack(self, delivery_tag)

    def confirm(self) -> None:
        """Read every reply outstanding: once this returns, Redis has applied all that was sent here."""
        self._exchange(None)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.confirm()
        super().reject(delivery_tag, requeue)

    def restore_unacked(self, client: Any = None) -> None:
        self.confirm()
        super().restore_unacked(client)

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        self.confirm()
        super().restore_visible(*args, **kwargs)

    def restore_by_tag(self, tag: str, client: Any = None, leftmost: bool = False) -> None:
        self.confirm()
        super().restore_by_tag(tag, client, leftmost)

    def _transaction(self, commands: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """``commands`` (on keys without the global prefix) wrapped in MULTI/EXEC, keys prefixed."""
        prefix = self.channel.global_keyprefix
        return [("MULTI",), *((name, prefix + key, *args) for name, key, *args in commands), ("EXEC",)]

    def _exchange(self, transaction: list[tuple[Any, ...]] | None) -> None:
        """Write ``transaction`` (None: nothing new), then read every reply outstanding but its own.

        A connection Redis dropped (a restart, an idle timeout) is replaced, as a pool would replace
        it at checkout, and all that is unconfirmed is written again and confirmed on the new one.
        Any other error leaves the connection closed, so no reply is ever left unread on it.
        """
        with self._lock:
            if transaction is not None:
                self._unconfirmed.append(transaction)
            if not self._unconfirmed:
                return  # nothing to read; and no connection to open, on a channel that may be closing
            pool = self.channel.reachable_pool()
            if self._pool is not pool:  # a new pool: after a fork, or after the channel dropped a broken one
                # Checked out for good: the pool counts it in use, so closing the pool closes it too.
                # What was written on the old pool's connection is written again on this one.
                self._pool, self._connection, self._written = pool, pool.get_connection(), 0
            conn = self._connection
            try:
                try:
                    self._settle(conn, outstanding=0 if transaction is None else 1)
                except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError):
                    conn.disconnect()
                    self._written = 0
                    self._settle(conn, outstanding=0)
            except BaseException:
                conn.disconnect()
                self._unconfirmed.clear()
                self._written = 0
                raise

    def _settle(self, conn: Any, *, outstanding: int) -> None:
        """Write what ``conn`` has not carried yet, then read replies until ``outstanding`` are left."""
        for transaction in self._unconfirmed[self._written:]:
            conn.send_packed_command(conn.pack_commands(transaction))
            self._written += 1
        while len(self._unconfirmed) > outstanding:
            replies = [conn.read_response() for _ in self._unconfirmed[0]]  # an error reply raises
            transaction = self._unconfirmed.pop(0)
            self._written -= 1
            failed = [result for result in replies[-1] if isinstance(result, Exception)]  # EXEC's, one per command
            if failed:
                log.error("Redis refused the unacked bookkeeping %s: %s", [command[0] for command in transaction[1:-1]],
                          failed[0])


class Channel(redis.Channel):  # type: ignore[misc]
    """kombu's Redis channel, reusing one client for the operations that are not handed one, and closing
    safely after Redis crashed under it."""

    QoS = QoS
    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.reachable_pool()  # a new pool after the channel dropped its old one (a fork, a failed ping)
        shared = self._shared_client
        if shared is None or shared.connection_pool is not pool:
            shared = self._shared_client = self._create_client()
        yield shared

    def reachable_pool(self) -> Any:
        """The channel's pool (a new one if it dropped its last); a connection error once the channel is
        cut off from its connection.

        After Redis went away under a worker, Celery's consumer closes the channel and reconnects on a
        new one, but a task delivered on this one may end later and ack here. kombu would build a pool
        from the connection's parameters, which are gone (the transport was detached, or the channel
        closed), and raise AttributeError, which ends the worker; a connection error is what kombu
        logs for an ack that cannot be made ("Couldn't ack") before it goes on. The message stays
        unacked, and Redis redelivers it after the visibility timeout if it kept it; the claim then
        finds its receipt has moved on.
        """
        if self.connection is None or self.connection.client is None:
            raise redis_errors.ConnectionError("this channel was closed with its broker connection")
        return self.pool

    def close(self) -> None:
        qos = self._qos
        if qos is not None and not self.closed:
            try:
                qos.confirm()  # before the pools close, with the bookkeeping's connection
            except Exception:  # noqa: BLE001 - closing goes on; kombu restores what it can
                log.warning("could not confirm the unacked bookkeeping before closing the channel", exc_info=True)
        if not self.closed and self.connection.client is None:
            # Redis went away under a worker: its consumer's Connection.collect() tried to close this
            # channel, failed on the dead connection before the channel counted as closed (an
            # outstanding BRPOP, the broadcast queue's auto-delete), and detached the transport from
            # its connection all the same. Restoring the unacked messages now would build a pool from
            # connection parameters that are gone (kombu raises AttributeError, which the worker does
            # not survive), and Redis is down anyway: they stay unacked, and Redis redelivers them
            # after the visibility timeout if it kept them (their receipts are the truth either way).
            self.do_restore = False
        super().close()


class Transport(redis.Transport):  # type: ignore[misc]
    Channel = Channel


def broker_transport(broker_url: str) -> str | None:
    """The ``broker_transport`` setting for ``broker_url``: this transport for ``redis://``, else None
    (kombu picks by the URL's scheme)."""
    return TRANSPORT if broker_url.startswith("redis://") else None
