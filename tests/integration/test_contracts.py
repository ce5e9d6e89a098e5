"""Contracts with the internals of kombu and redis-py that toolrelay relies on, checked on a real Redis.

Two modules lean on what these libraries do not promise: ``gateway/publisher.py`` builds kombu's
Redis message by hand (and LPUSHes it from the event loop), and ``workers/redis_transport.py``
subclasses kombu's Redis ``QoS`` and ``Channel`` and writes packed commands on a redis-py
connection. pyproject.toml pins kombu and redis to the minor versions these tests pass on; when an
upgrade changes one of those internals, a test here fails before a deployment does.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from redis import connection as redis_connection

from gateway.publisher import RedisPublisher
from receipts.db import Database
from receipts.messages import EXECUTE_TASK, publish_execute, transport_options
from receipts.records import Receipt
from receipts.settings import Settings
from receipts.store import calls
from tests.support import services
from tests.support.factories import call
from workers import redis_transport

# What differs between two messages for the same call, by design: ids, and the reply queue that only
# kombu's producer names (an execute task's result is never sent back to anyone).
PER_MESSAGE = {("headers", "id"), ("headers", "root_id"), ("properties", "correlation_id"),
               ("properties", "delivery_tag"), ("properties", "reply_to")}
# The body is base64 of JSON: compared decoded (kombu reads it with json.loads; its spacing is no contract).
ENCODED = {("body",)}


@pytest.fixture
def prefix() -> Iterator[str]:
    prefix = services.redis_prefix()
    yield prefix
    services.clear_redis_prefix(prefix)


def celery_app(prefix: str) -> Celery:
    """A publisher's Celery app, configured as the gateway's is."""
    settings = Settings(broker_url=services.REDIS_URL, broker_key_prefix=prefix)
    app = Celery("contracts", broker=settings.broker_url, set_as_current=False)
    app.conf.update(broker_transport_options=transport_options(settings), task_serializer="json",
                    task_ignore_result=True)
    return app


def listed(key: str) -> list[dict[str, Any]]:
    """The messages on the Redis list ``key``, oldest first, as JSON."""
    client = redis.Redis.from_url(services.REDIS_URL)
    try:
        return [json.loads(item) for item in reversed(client.lrange(key, 0, -1))]
    finally:
        client.close()


def fields(value: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every leaf of a JSON value by its path; an empty dict or list counts as a leaf."""
    if isinstance(value, dict) and value:
        return {leaf: v for key, item in value.items() for leaf, v in fields(item, (*path, key)).items()}
    return {path: value}


def publish_with_kombu_and_with_the_gateway(db: Database, prefix: str) -> tuple[Receipt, dict[str, Any],
                                                                                  dict[str, Any]]:
    """One receipt's execute message as kombu's producer sends it, and as the gateway's publisher does."""
    app = celery_app(prefix)
    receipt, _ = db.run(calls.create(call()))
    publish_execute(app, receipt, grace_s=4, ignore_result=True)
    publisher = RedisPublisher(app, grace_s=4)

    async def publish() -> None:
        publisher(receipt)
        await publisher.aclose()

    asyncio.run(publish())
    kombus, gateways = listed(f"{prefix}{receipt.queue}")
    return receipt, kombus, gateways


def test_the_gateway_pushes_kombus_envelope_field_for_field(db: Database, prefix: str) -> None:
    receipt, kombus, gateways = publish_with_kombu_and_with_the_gateway(db, prefix)
    theirs, ours = fields(kombus), fields(gateways)
    assert sorted(ours) == sorted(theirs)  # the same fields, none missing, none added
    assert {path: value for path, value in ours.items() if path not in PER_MESSAGE | ENCODED} == {
        path: value for path, value in theirs.items() if path not in PER_MESSAGE | ENCODED}
    body = json.loads(base64.b64decode(gateways["body"]))
    assert body == json.loads(base64.b64decode(kombus["body"]))
    assert body[0] == [receipt.id, receipt.timeout_s + 4]
    headers, properties = gateways["headers"], gateways["properties"]
    assert headers["id"] == headers["root_id"] == properties["correlation_id"] != kombus["headers"]["id"]
    assert properties["delivery_tag"] != kombus["properties"]["delivery_tag"]
    assert properties["reply_to"] == "" and isinstance(kombus["properties"]["reply_to"], str)


def test_the_gateway_pushes_to_the_list_kombu_pushes_to(db: Database, prefix: str) -> None:
    receipt, _, _ = publish_with_kombu_and_with_the_gateway(db, prefix)
    assert RedisPublisher(celery_app(prefix), grace_s=4).command(receipt)[0] == f"{prefix}{receipt.queue}"
    assert RedisPublisher(celery_app(""), grace_s=4).command(receipt)[0] == receipt.queue


@pytest.mark.parametrize("transport", [kombu_redis.Transport, redis_transport.Transport], ids=["kombu", "toolrelay"])
def test_kombus_consumer_reads_the_gateways_message(db: Database, prefix: str, transport: type) -> None:
    app = celery_app(prefix)
    receipt, _ = db.run(calls.create(call()))
    queue_name, pushed = RedisPublisher(app, grace_s=4).command(receipt)
    client = redis.Redis.from_url(services.REDIS_URL)
    client.lpush(queue_name, pushed)
    client.close()
    sent = json.loads(pushed)
    with Connection(services.REDIS_URL, transport=transport,
                    transport_options={"global_keyprefix": prefix, "visibility_timeout": 3600}) as conn:
        queue = conn.SimpleQueue(receipt.queue)
        message = queue.get(timeout=5)
        assert message.headers == sent["headers"] and message.headers["task"] == EXECUTE_TASK
        assert message.content_type == "application/json" and message.content_encoding == "utf-8"
        assert message.payload == [[receipt.id, receipt.timeout_s + 4], {},
                                   {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
        assert message.delivery_tag == sent["properties"]["delivery_tag"]
        assert message.properties["correlation_id"] == sent["headers"]["id"]
        message.ack()
        queue.close()


# -- workers/redis_transport.py: what it overrides and what it calls --------------------------------


def parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_qos_methods_it_overrides_are_called_as_it_expects() -> None:
    # kombu calls these with these arguments; the overrides pass them on to kombu's own, by position.
    assert parameters(kombu_redis.QoS.append) == ["self", "message", "delivery_tag"]
    assert parameters(kombu_redis.QoS.ack) == ["self", "delivery_tag"]
    assert parameters(kombu_redis.QoS.reject) == ["self", "delivery_tag", "requeue"]
    assert parameters(kombu_redis.QoS.restore_unacked) == ["self", "client"]
    assert parameters(kombu_redis.QoS.restore_visible) == ["self", "start", "num", "interval"]
    assert parameters(kombu_redis.QoS.restore_by_tag) == ["self", "tag", "client", "leftmost"]
    assert parameters(virtual.QoS.append) == ["self", "message", "delivery_tag"]
    assert parameters(virtual.QoS.ack) == ["self", "delivery_tag"]
    for name in ("append", "ack", "reject", "restore_unacked", "restore_visible", "restore_by_tag"):
        assert name in vars(kombu_redis.QoS), name  # kombu's Redis QoS itself defines what super() reaches
        assert name in vars(redis_transport.QoS), name


def test_the_channel_methods_and_attributes_it_uses_exist() -> None:
    assert parameters(kombu_redis.Channel.conn_or_acquire) == ["self", "client"]
    assert parameters(kombu_redis.Channel.close) == ["self"]
    assert parameters(kombu_redis.Channel._create_client) == ["self", "asynchronous"]
    assert isinstance(inspect.getattr_static(kombu_redis.Channel, "pool"), property)
    assert kombu_redis.Channel.QoS is kombu_redis.QoS and kombu_redis.Transport.Channel is kombu_redis.Channel
    assert (kombu_redis.Channel.unacked_key, kombu_redis.Channel.unacked_index_key) == ("unacked", "unacked_index")
    assert kombu_redis.Channel.global_keyprefix == ""
    assert redis_transport.Transport.Channel is redis_transport.Channel
    assert redis_transport.Channel.QoS is redis_transport.QoS


def test_a_live_channel_and_message_have_what_it_reads(prefix: str) -> None:
    with Connection(services.REDIS_URL, transport=kombu_redis.Transport,
                    transport_options={"global_keyprefix": prefix, "visibility_timeout": 3600}) as conn:
        channel = conn.default_channel
        assert channel._qos is None and channel.closed is False
        qos = channel.qos
        assert channel._qos is qos and qos.channel is channel
        assert (qos.unacked_key, qos.unacked_index_key) == ("unacked", "unacked_index")
        assert channel.global_keyprefix == prefix
        assert isinstance(channel.pool, redis.ConnectionPool)
        assert channel._create_client().connection_pool is channel.pool
        queue = conn.SimpleQueue("tasks")
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        assert set(message.delivery_info) >= {"exchange", "routing_key"}
        raw = message._raw  # the entry's first element: the message as it was on the list
        assert raw["properties"]["delivery_tag"] == message.delivery_tag
        assert json.loads(base64.b64decode(raw["body"])) == {"n": 1}
        message.ack()
        queue.close()


def unacked_entry(prefix: str, transport: type) -> tuple[list[Any], bool]:
    """The unacked hash's entry for a delivered message, and whether the index holds its tag.

    After the ack, neither holds anything.
    """
    raw = redis.Redis.from_url(services.REDIS_URL)
    with Connection(services.REDIS_URL, transport=transport,
                    transport_options={"global_keyprefix": prefix, "visibility_timeout": 3600}) as conn:
        queue = conn.SimpleQueue("tasks")
        queue.put({"receipt": "rcpt_1"}, headers={"task": EXECUTE_TASK})
        message = queue.get(timeout=5)
        if isinstance(conn.default_channel.qos, redis_transport.QoS):
            conn.default_channel.qos.confirm()
        entry = json.loads(raw.hget(f"{prefix}unacked", message.delivery_tag))
        indexed = raw.zscore(f"{prefix}unacked_index", message.delivery_tag) is not None
        message.ack()
        if isinstance(conn.default_channel.qos, redis_transport.QoS):
            conn.default_channel.qos.confirm()
        assert (raw.hlen(f"{prefix}unacked"), raw.zcard(f"{prefix}unacked_index")) == (0, 0)
        queue.close()
    raw.close()
    entry[0]["properties"].pop("delivery_tag")
    return entry, indexed


def test_the_unacked_bookkeeping_is_what_kombu_writes(prefix: str) -> None:
    assert unacked_entry(prefix, redis_transport.Transport) == unacked_entry(prefix, kombu_redis.Transport)
    entry, indexed = unacked_entry(prefix, redis_transport.Transport)
    assert indexed and entry[1:] == ["tasks", "tasks"]


def test_redis_connections_take_packed_transactions_and_answer_each_command() -> None:
    assert parameters(redis.ConnectionPool.get_connection)[1:] == ["command_name", "keys", "options"]
    assert parameters(redis_connection.Connection.pack_commands) == ["self", "commands"]
    assert parameters(redis_connection.Connection.send_packed_command)[:2] == ["self", "command"]
    assert inspect.signature(redis_connection.Connection.read_response).bind(None)  # callable with no argument
    assert inspect.signature(redis_connection.Connection.disconnect).bind(None)
    prefix = services.redis_prefix()
    pool = redis.ConnectionPool.from_url(services.REDIS_URL)
    conn = pool.get_connection()
    try:
        transaction = [("MULTI",), ("ZADD", f"{prefix}z", 1.5, "tag"), ("HSET", f"{prefix}h", "tag", "entry"),
                       ("EXEC",)]
        conn.send_packed_command(conn.pack_commands(transaction))
        replies = [conn.read_response() for _ in transaction]
        assert replies[:3] == [b"OK", b"QUEUED", b"QUEUED"] and replies[3] == [1, 1]
        # A command Redis refuses inside the transaction: EXEC answers its error in the list, not raised.
        failing = [("MULTI",), ("ZADD", f"{prefix}h", 1.0, "tag"), ("HDEL", f"{prefix}h", "tag"), ("EXEC",)]
        conn.send_packed_command(conn.pack_commands(failing))
        replies = [conn.read_response() for _ in failing]
        assert isinstance(replies[3][0], redis.exceptions.ResponseError) and "WRONGTYPE" in str(replies[3][0])
        assert replies[3][1] == 1
    finally:
        conn.disconnect()
        pool.disconnect()
        services.clear_redis_prefix(prefix)
