"""The workers' Redis transport on a real Redis: the same messages and bookkeeping as kombu's, one client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from kombu import Connection

from receipts.settings import Settings
from tests.support import services
from workers.celery_app import make_celery
from workers.redis_transport import Channel, Transport, broker_transport


@pytest.fixture
def prefix() -> Iterator[str]:
    prefix = services.redis_prefix()
    yield prefix
    services.clear_redis_prefix(prefix)


def connection(prefix: str) -> Connection:
    return Connection(services.REDIS_URL, transport=Transport,
                      transport_options={"global_keyprefix": prefix, "visibility_timeout": 3600})


def test_a_message_is_kept_unacked_until_its_ack_with_one_client_for_both(prefix: str) -> None:
    raw = redis.Redis.from_url(services.REDIS_URL)
    with connection(prefix) as conn:
        channel = conn.default_channel
        assert isinstance(channel, Channel)
        queue = conn.SimpleQueue("tasks")
        queue.put({"receipt": "rcpt_1"})

        message = queue.get(timeout=5)
        assert message.payload == {"receipt": "rcpt_1"}
        assert raw.hlen(f"{prefix}unacked") == 1  # delivered, not yet acked: Redis would redeliver it
        client = channel._shared_client
        assert client is not None

        message.ack()
        assert raw.hlen(f"{prefix}unacked") == 0
        assert raw.zcard(f"{prefix}unacked_index") == 0
        assert channel._shared_client is client  # the put, the delivery and the ack: one client
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


def test_a_client_handed_in_is_the_one_used(prefix: str) -> None:
    with connection(prefix) as conn:
        own = redis.Redis.from_url(services.REDIS_URL)
        with conn.default_channel.conn_or_acquire(own) as client:
            assert client is own


def test_only_plain_redis_urls_use_it() -> None:
    assert broker_transport("redis://127.0.0.1:6379/0") == "workers.redis_transport:Transport"
    for url in ("rediss://example:6380/0", "sentinel://example:26379", "amqp://guest@localhost//", "memory://"):
        assert broker_transport(url) is None


def test_the_worker_app_connects_through_it() -> None:
    app = make_celery(Settings(broker_url=services.REDIS_URL))
    with app.connection_for_read() as conn:
        assert isinstance(conn.transport, Transport)
    in_memory = make_celery(Settings(broker_url="memory://"))
    with in_memory.connection_for_read() as conn:
        assert not isinstance(conn.transport, Transport)
