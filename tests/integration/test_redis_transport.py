"""The workers' Redis transport on a real Redis: the same messages and bookkeeping as kombu's, cheaper."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Queue
from kombu.transport import redis as kombu_redis

from receipts.settings import Settings
from tests.chaos.services import OwnRedis
from tests.support import services
from tests.support.stack import running_stack
from workers.celery_app import make_celery
from workers.redis_transport import Channel, QoS, Transport, broker_transport


@pytest.fixture
def prefix() -> Iterator[str]:
    prefix = services.redis_prefix()
    yield prefix
    services.clear_redis_prefix(prefix)


def connection(prefix: str) -> Connection:
    return Connection(services.REDIS_URL, transport=Transport,
                      transport_options={"global_keyprefix": prefix, "visibility_timeout": 3600})


def unacked(prefix: str) -> tuple[int, int]:
    """Entries in the unacked hash and in its index, as Redis holds them now."""
    raw = redis.Redis.from_url(services.REDIS_URL)
    return raw.hlen(f"{prefix}unacked"), raw.zcard(f"{prefix}unacked_index")


def queue_of(conn: Connection, messages: int) -> Any:
    """The "tasks" queue with ``messages`` messages ``{"n": 0}``, ``{"n": 1}``... on it."""
    queue = conn.SimpleQueue("tasks")
    for n in range(messages):
        queue.put({"n": n})
    return queue


def test_a_message_is_kept_unacked_until_its_ack_with_one_client_for_both(prefix: str) -> None:
    with connection(prefix) as conn:
        channel = conn.default_channel
        assert isinstance(channel, Channel)
        queue = conn.SimpleQueue("tasks")
        queue.put({"receipt": "rcpt_1"})

        message = queue.get(timeout=5)
        assert message.payload == {"receipt": "rcpt_1"}
        channel.qos.confirm()
        assert unacked(prefix) == (1, 1)  # delivered, not yet acked: Redis would redeliver it
        client = channel._shared_client
        assert client is not None

        message.ack()
        channel.qos.confirm()
        assert unacked(prefix) == (0, 0)
        assert channel._shared_client is client  # the put, the delivery and the ack: one client
        queue.close()


def test_unacked_entries_are_kombus_own_so_its_restore_brings_them_back(prefix: str) -> None:
    with connection(prefix) as conn:
        queue = conn.SimpleQueue("tasks")
        queue.put({"receipt": "rcpt_1"})
        message = queue.get(timeout=5)
        assert isinstance(conn.default_channel.qos, QoS)
        queue.close()
    # The worker went away without acking. kombu's own transport, as a worker that does not use
    # this one would, finds the entry and puts the message back on its queue.
    stock = Connection(services.REDIS_URL, transport=kombu_redis.Transport,
                       transport_options={"global_keyprefix": prefix, "visibility_timeout": 3600})
    with stock:
        stock.default_channel.qos.restore_by_tag(message.delivery_tag)
        again = stock.SimpleQueue("tasks").get(timeout=5)
        assert again.payload == {"receipt": "rcpt_1"}
        assert again.delivery_tag == message.delivery_tag
        again.ack()
    assert unacked(prefix) == (0, 0)


def test_each_reply_is_read_once_the_next_transaction_is_written_and_confirm_reads_the_last(prefix: str) -> None:
    raw = redis.Redis.from_url(services.REDIS_URL)
    with connection(prefix) as conn:
        queue = queue_of(conn, 2)
        qos = conn.default_channel.qos
        first = queue.get(timeout=5)
        assert len(qos._unconfirmed) == 1  # the entry is written; the worker did not wait for Redis to answer
        first.ack()
        assert len(qos._unconfirmed) == 1  # the ack is written, and the entry's reply was read
        qos.confirm()
        assert qos._unconfirmed == []
        assert unacked(prefix) == (0, 0)
        second = queue.get(timeout=5)
        qos.confirm()
        assert raw.hget(f"{prefix}unacked", second.delivery_tag) is not None
        second.ack()
        queue.close()
    assert unacked(prefix) == (0, 0)  # closing the channel confirmed the last ack


def test_the_bookkeeping_survives_redis_dropping_its_connection(prefix: str) -> None:
    raw = redis.Redis.from_url(services.REDIS_URL)
    with connection(prefix) as conn:
        queue = queue_of(conn, 3)
        qos = conn.default_channel.qos
        first = queue.get(timeout=5)

        def drop_bookkeeping_connection() -> None:  # as a Redis restart or an idle timeout would
            qos.confirm()
            qos._connection.send_command("CLIENT", "ID")
            assert raw.client_kill_filter(_id=qos._connection.read_response()) == 1

        drop_bookkeeping_connection()
        first.ack()  # written on a connection Redis has closed: lost, then sent again on a new one
        qos.confirm()
        assert unacked(prefix) == (0, 0)
        drop_bookkeeping_connection()
        second = queue.get(timeout=5)  # its unacked entry, the same way
        qos.confirm()
        assert unacked(prefix) == (1, 1)
        second.ack()
        queue.get(timeout=5).ack()
        qos.confirm()
        assert unacked(prefix) == (0, 0)
        queue.close()


def test_what_was_unconfirmed_when_the_pool_was_replaced_is_sent_again(prefix: str) -> None:
    raw = redis.Redis.from_url(services.REDIS_URL)
    with connection(prefix) as conn:
        queue = queue_of(conn, 1)
        qos = conn.default_channel.qos
        message = queue.get(timeout=5)
        raw.delete(f"{prefix}unacked", f"{prefix}unacked_index")  # as if the entry had been lost with the pool
        conn.default_channel._disconnect_pools()
        qos.confirm()
        assert raw.hget(f"{prefix}unacked", message.delivery_tag) is not None
        message.ack()
        qos.confirm()
        assert unacked(prefix) == (0, 0)
        queue.close()


def test_a_transaction_redis_refuses_is_logged_and_the_connection_goes_on(
        prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    raw = redis.Redis.from_url(services.REDIS_URL)
    with connection(prefix) as conn:
        queue = queue_of(conn, 1)
        message = queue.get(timeout=5)
        qos = conn.default_channel.qos
        qos.confirm()
        raw.delete(f"{prefix}unacked")
        raw.set(f"{prefix}unacked", "not a hash")
        message.ack()
        qos.confirm()
        assert "Redis refused the unacked bookkeeping ['ZREM', 'HDEL']: WRONGTYPE" in caplog.text
        raw.delete(f"{prefix}unacked")
        queue.put({"n": 2})
        queue.get(timeout=5).ack()  # the connection is still good for the next one
        qos.confirm()
        assert unacked(prefix) == (0, 0)
        queue.close()


def test_acks_from_several_threads_each_land(prefix: str) -> None:
    with connection(prefix) as conn:
        queue = queue_of(conn, 40)
        messages = [queue.get(timeout=5) for _ in range(40)]
        conn.default_channel.qos.confirm()
        assert unacked(prefix) == (40, 40)
        errors: list[BaseException] = []

        def ack(batch: list) -> None:
            try:
                for message in batch:
                    message.ack()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=ack, args=(messages[i::4],)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        conn.default_channel.qos.confirm()
        assert unacked(prefix) == (0, 0)
        queue.close()


def test_a_new_pool_gets_a_new_client(prefix: str) -> None:
    with connection(prefix) as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as first:
            pass
        channel._disconnect_pools()  # what the channel does after a fork
        with channel.conn_or_acquire() as second:
            assert second.ping()
        assert second is not first
        assert second.connection_pool is channel.pool


def test_a_new_pool_gets_a_new_bookkeeping_connection(prefix: str) -> None:
    with connection(prefix) as conn:
        queue = queue_of(conn, 2)
        qos = conn.default_channel.qos
        queue.get(timeout=5).ack()
        first = qos._connection
        conn.default_channel._disconnect_pools()  # what the channel does after a fork
        queue.get(timeout=5).ack()
        assert qos._connection is not first
        assert qos._pool is conn.default_channel.pool
        qos.confirm()
        assert unacked(prefix) == (0, 0)
        queue.close()


def test_a_client_handed_in_is_the_one_used(prefix: str) -> None:
    with connection(prefix) as conn:
        own = redis.Redis.from_url(services.REDIS_URL)
        with conn.default_channel.conn_or_acquire(own) as client:
            assert client is own


def consuming_like_a_worker(conn: Connection) -> tuple[Any, list[Any]]:
    """A worker's consumer on ``conn``: the tasks queue and a broadcast (fanout, auto-delete) queue, one
    task delivered and not acked (still running), and a BRPOP outstanding for the next one."""
    channel = conn.default_channel
    tasks = Queue("tasks", Exchange("tasks", "direct"), "tasks")
    broadcast = Queue("w.pidbox", Exchange("pidbox", "fanout"), auto_delete=True)
    delivered: list[Any] = []
    Consumer(channel, [tasks, broadcast], callbacks=[lambda _body, message: delivered.append(message)]).consume()
    conn.Producer().publish({"receipt": "rcpt_1"}, exchange=tasks.exchange, routing_key="tasks", declare=[tasks])
    conn.drain_events(timeout=5)
    assert len(delivered) == 1
    channel._brpop_start()  # the worker's event loop waits for the next message
    return channel, delivered


def test_a_channel_closed_again_after_redis_crashed_under_it_does_not_raise(tmp_path: Path) -> None:
    # What a worker's consumer does when Redis goes away: Connection.collect(), then close(). With a
    # BRPOP outstanding and the broadcast queue of a worker's control and gossip, both closes in
    # collect() fail on the dead connection before the channel counts as closed, and collect()
    # detaches the transport from its connection all the same. kombu's next close would then build
    # a pool from connection parameters that are gone to restore the unacked messages, raising
    # AttributeError: the worker exited "Unrecoverable error".
    own = OwnRedis(tmp_path)
    own.start()
    try:
        conn = Connection(own.url, transport=Transport)
        channel, _ = consuming_like_a_worker(conn)
        own.crash()
        conn.collect()
        conn.close()  # raised AttributeError: 'NoneType' object has no attribute 'hostname'
        assert channel.closed
    finally:
        own.close()


def test_a_late_ack_on_a_channel_closed_with_its_connection_is_a_connection_error(tmp_path: Path) -> None:
    # A task delivered before Redis crashed ends after the consumer reconnected on a new channel;
    # its ack goes to the old channel, closed with its connection. kombu logs a connection error
    # there ("Couldn't ack") and goes on; anything else ends the worker (Unrecoverable error).
    own = OwnRedis(tmp_path)
    own.start()
    try:
        conn = Connection(own.url, transport=Transport)
        _, delivered = consuming_like_a_worker(conn)
        own.crash()
        conn.collect()
        conn.close()
        own.start()
        with pytest.raises(redis.ConnectionError):
            delivered[0].ack()  # raised AttributeError: 'NoneType' object has no attribute 'client'
    finally:
        own.close()


def test_only_plain_redis_urls_use_it() -> None:
    assert broker_transport("redis://127.0.0.1:6379/0") == "workers.redis_transport:Transport"
    for url in ("rediss://example:6380/0", "sentinel://example:26379", "amqp://guest@localhost//", "memory://"):
        assert broker_transport(url) is None


def test_the_worker_app_connects_through_it() -> None:
    app = make_celery(Settings(broker_url=services.REDIS_URL)).app
    with app.connection_for_read() as conn:
        assert isinstance(conn.transport, Transport)
    in_memory = make_celery(Settings(broker_url="memory://")).app
    with in_memory.connection_for_read() as conn:
        assert not isinstance(conn.transport, Transport)


def test_without_the_fast_path_the_worker_app_uses_kombus_transport() -> None:
    app = make_celery(Settings(broker_url=services.REDIS_URL, redis_fast_path=False)).app
    with app.connection_for_read() as conn:
        assert type(conn.transport) is kombu_redis.Transport


def test_without_the_fast_path_a_call_runs_end_to_end_on_kombus_own(tmp_path: Path) -> None:
    # The gateway publishes through kombu (its BatchPublisher thread), the worker consumes through
    # kombu's transport: what an operator gets with TOOLRELAY_REDIS_FAST_PATH=false.
    with running_stack(tmp_path, redis_fast_path="false") as stack, stack.client() as client:
        accepted = client.post("/v1/tool-calls", json={"tool": "echo", "arguments": {"path": "kombu"}})
        assert accepted.status_code == 202, accepted.text
        done = stack.wait_terminal(accepted.json()["id"])
        assert (done["status"], done["output"]) == ("success", {"path": "kombu"})
