"""The ``toolrelay`` command: dev, gateway, worker, beat, migrate, keys, purge."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from receipts.db import Database
from receipts.errors import InvalidInput, NotConfigured
from receipts.records import KeyInfo
from receipts.settings import Settings, load_settings
from receipts.telemetry import tracing
from toolrelay import heap, logs
from toolrelay.durations import parse_duration

cli = typer.Typer(help="toolrelay: durable, verifiable execution of LLM tool calls.", no_args_is_help=True,
                  add_completion=False)
keys = typer.Typer(help="Manage API keys.", no_args_is_help=True)
cli.add_typer(keys, name="keys")

PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def _settings() -> Settings:
    try:
        return load_settings()
    except Exception as exc:  # noqa: BLE001 - a configuration error is reported, not traced
        raise typer.BadParameter(f"invalid TOOLRELAY_* configuration: {exc}") from None


def _database() -> Database:
    try:
        return Database.from_settings(_settings())
    except NotConfigured as exc:
        raise typer.BadParameter(exc.message) from None


@cli.command()
def dev(
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8000,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    data_dir: Annotated[Path, typer.Option(
        help="Where dev keeps its PostgreSQL cluster (pg/), API key and secret key.")] = Path(".toolrelay"),
    api_key: Annotated[str | None, typer.Option(envvar="TOOLRELAY_DEV_API_KEY", help="Use this API key.")] = None,
) -> None:
    """Run everything in one process, with no services: gateway, worker, sweeper, webhook dispatcher."""
    from toolrelay.dev import run_dev

    settings = _settings()
    logs.configure(settings)
    tracing.configure("toolrelay-dev")
    run_dev(settings, host=host, port=port, data_dir=data_dir.resolve(), api_key=api_key)


@cli.command()
def gateway(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8000,
    workers: Annotated[int, typer.Option(help="Gateway processes.")] = 1,
) -> None:
    """Run the HTTP API (stateless: run as many as you like behind a load balancer). With ``--workers``
    above 1, each process's /metrics serves the figures of all of them, summed."""
    import uvicorn

    if workers > 1:
        from toolrelay import worker_metrics

        worker_metrics.prepare()  # before prometheus_client is first imported: the processes inherit it
    logs.configure(_settings())
    # log_config=None: uvicorn's own lines go through the process's logging (text or JSON) too.
    uvicorn.run("toolrelay.asgi:app_factory", factory=True, host=host, port=port, workers=workers,
                log_level="warning", log_config=None)


@cli.command(context_settings=PASS_THROUGH)
def worker(ctx: typer.Context) -> None:
    """Run a Celery worker that executes tool calls. Extra arguments go to ``celery worker``.

    Without ``-Q``, it consumes every queue its tools declare plus ``runs`` and ``webhooks``. With
    ``TOOLRELAY_METRICS_PORT``, it serves ``/metrics`` (every process's figures, summed) on that port.
    """
    settings = _settings()
    logs.configure(settings, celery=True)
    tracing.configure("toolrelay-worker")  # before the pool forks: the children inherit the provider
    if settings.metrics_port:
        from toolrelay import worker_metrics

        worker_metrics.prepare()  # before prometheus_client is first imported (by build_celery)
    from celery import signals

    from toolrelay.components import build_celery

    app, services = build_celery(settings)
    if settings.metrics_port:
        worker_metrics.serve(app, settings.metrics_host, settings.metrics_port)
    argv = ["worker", *ctx.args]
    if not {"-Q", "--queues"} & set(ctx.args) and not any(a.startswith("--queues=") for a in ctx.args):
        queues = services.registry.queues() | {"tools", "runs", "webhooks"}
        argv += ["-Q", ",".join(sorted(queues))]
    if not any(a.startswith(("-l", "--loglevel")) for a in ctx.args):
        argv += ["--loglevel", settings.log_level]
    settle_when_started(signals.worker_ready, signals.worker_process_init)
    app.worker_main(argv=argv)


@cli.command(context_settings=PASS_THROUGH)
def beat(ctx: typer.Context) -> None:
    """Run Celery beat, which runs the sweeper and wakes the webhook dispatcher. Extra arguments go to ``celery beat``.

    The sweeper runs on a thread of the beat process, not as a queued task, so no backlog of tool
    calls can delay a sweep (see :mod:`workers.sweeper`).
    """
    from celery import signals

    from toolrelay.components import build_celery

    settings = _settings()
    logs.configure(settings, celery=True)
    app, _ = build_celery(settings)
    argv = ["beat", *ctx.args]
    if not any(a.startswith(("-l", "--loglevel")) for a in ctx.args):  # the sweeper's lines, like a worker's
        argv += ["--loglevel", settings.log_level]
    settle_when_started(signals.beat_init)
    app.start(argv=argv)


def settle_when_started(*started: Any) -> None:
    """Settle the heap (toolrelay/heap.py) of each process as these Celery signals say it has started:
    a worker once it is ready, each pool process once it is set up after its fork, beat as it starts."""
    for signal in started:
        signal.connect(lambda **_: heap.settle(), weak=False)


@cli.command()
def migrate() -> None:
    """Create or upgrade the database schema (safe to run again, and from several hosts)."""
    from receipts.schema.migrate import upgrade

    logs.configure(_settings())
    upgrade(_database())
    typer.echo("database is up to date")


def _duration(text: str | None, option: str) -> float | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _scope(info: KeyInfo) -> str:
    tools = ",".join(info.tools) if info.tools is not None else "all tools"
    return f"{tools}{' read-only' if info.read_only else ''}"


@keys.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="Tenant name (created if new).")],
    tools: Annotated[str | None, typer.Option(help="Comma-separated tools the key may see and call "
                                                   "(default: every tool of the tenant).")] = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="The key may read, not change anything.")] = False,
    expires_in: Annotated[str | None, typer.Option(help="Lifetime, e.g. 30d, 12h, 90m (default: none).")] = None,
) -> None:
    """Create an API key for a tenant. The key is printed once, alone on the last line."""
    from receipts.tenants import issue

    lifetime = _duration(expires_in, "--expires-in")
    scope = tools.split(",") if tools is not None else None
    try:
        key, info = _database().run(issue(tenant, tools=scope, read_only=read_only, expires_in_s=lifetime))
    except InvalidInput as exc:
        field = exc.errors[0]["field"] if exc.errors else "tools"
        raise typer.BadParameter(exc.message, param_hint="--tools" if field == "tools" else "--expires-in") from None
    typer.echo(f"created API key {info.id} for tenant {tenant!r} ({_scope(info)}, "
               f"expires {_when(info.expires_at) if info.expires_at else 'never'}); it is shown only once:")
    typer.echo(key)


@keys.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """List API keys (never the keys themselves): id, tenant, prefix, scopes, expiry, created, last use, state."""
    from receipts.tenants import list_keys

    found = _database().run(list_keys(tenant))
    if as_json:
        for info in found:
            typer.echo(json.dumps(info.to_api()))
        return
    rows = [("ID", "TENANT", "PREFIX", "TOOLS", "ACCESS", "EXPIRES", "CREATED", "LAST USED", "STATE")]
    for info in found:
        state = f"revoked {_when(info.revoked_at)}" if info.revoked_at else info.state
        rows.append((info.id, info.tenant, info.prefix, ",".join(info.tools) if info.tools is not None else "*",
                     "read-only" if info.read_only else "read-write", _when(info.expires_at),
                     _when(info.created_at), _when(info.last_used_at), state))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


@keys.command("revoke")
def keys_revoke(key: Annotated[str, typer.Argument(metavar="KEY_ID_OR_KEY", help="The key's id, or the key.")]) -> None:
    """Revoke an API key. Gateways refuse it (401) within TOOLRELAY_AUTH_CACHE_S (5 s by default)."""
    from receipts.tenants import revoke

    found = _database().run(revoke(key))
    if found is None:
        typer.echo("no such API key", err=True)
        raise typer.Exit(1)
    info, revoked_now = found
    what = "revoked" if revoked_now else "was already revoked:"
    typer.echo(f"{what} API key {info.id} ({info.prefix}..., tenant {info.tenant!r}) at {_when(info.revoked_at)}")


@cli.command()
def purge(
    older_than: Annotated[str, typer.Option(help="Delete receipts finished longer ago than this, e.g. 30d.")],
    batch: Annotated[int, typer.Option(min=1, help="Rows per transaction.")] = 1000,
) -> None:
    """Delete finished receipts with their timelines, webhook messages and delivery attempts, then the
    finished batches whose receipts are all gone. Open receipts are never deleted, and a receipt whose
    idempotency key is younger than 24 h is kept, whatever --older-than says."""
    from receipts.store.retention import purge as run_purge

    logs.configure(_settings())
    seconds = _duration(older_than, "--older-than")
    assert seconds is not None
    total = run_purge(_database(), older_than_s=seconds, limit=batch)
    typer.echo(f"deleted {total.receipts} receipts, {total.events} timeline events, {total.messages} webhook "
               f"messages, {total.attempts} delivery attempts and {total.batches} batches "
               f"finished more than {older_than} ago")


def main() -> None:
    cli()
