"""The ``toolrelay`` command: dev, gateway, worker, beat, migrate, keys."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from receipts.db import Database
from receipts.errors import NotConfigured
from receipts.settings import Settings, load_settings
from toolrelay import logs

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

    logs.configure()
    run_dev(_settings(), host=host, port=port, data_dir=data_dir.resolve(), api_key=api_key)


@cli.command()
def gateway(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8000,
    workers: Annotated[int, typer.Option(help="Gateway processes.")] = 1,
) -> None:
    """Run the HTTP API (stateless: run as many as you like behind a load balancer)."""
    import uvicorn

    _settings()
    logs.configure()
    uvicorn.run("toolrelay.asgi:app_factory", factory=True, host=host, port=port, workers=workers,
                log_level="warning")


@cli.command(context_settings=PASS_THROUGH)
def worker(ctx: typer.Context) -> None:
    """Run a Celery worker that executes tool calls. Extra arguments go to ``celery worker``.

    Without ``-Q``, it consumes every queue its tools declare plus ``runs`` and ``webhooks``.
    """
    from toolrelay.components import build_celery

    logs.configure()
    app, services = build_celery(_settings())
    argv = ["worker", *ctx.args]
    if not {"-Q", "--queues"} & set(ctx.args) and not any(a.startswith("--queues=") for a in ctx.args):
        queues = services.registry.queues() | {"tools", "runs", "webhooks"}
        argv += ["-Q", ",".join(sorted(queues))]
    if not any(a.startswith(("-l", "--loglevel")) for a in ctx.args):
        argv += ["--loglevel", os.environ.get("TOOLRELAY_LOG_LEVEL", "INFO")]
    app.worker_main(argv=argv)


@cli.command(context_settings=PASS_THROUGH)
def beat(ctx: typer.Context) -> None:
    """Run Celery beat, which schedules the sweeper. Extra arguments go to ``celery beat``."""
    from toolrelay.components import build_celery

    logs.configure()
    app, _ = build_celery(_settings())
    app.start(argv=["beat", *ctx.args])


@cli.command()
def migrate() -> None:
    """Create or upgrade the database schema (safe to run again, and from several hosts)."""
    from receipts.schema.migrate import upgrade

    logs.configure()
    upgrade(_database())
    typer.echo("database is up to date")


@keys.command("create")
def keys_create(tenant: Annotated[str, typer.Option(help="Tenant name (created if new).")]) -> None:
    """Create an API key for a tenant. The key is printed once, alone on the last line."""
    from receipts.tenants import create_key

    key = _database().run(create_key(tenant))
    typer.echo(f"created an API key for tenant {tenant!r}; it is shown only once:")
    typer.echo(key)


def main() -> None:
    cli()
