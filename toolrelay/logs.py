"""Process logging: one line per event, with time, level and logger."""

from __future__ import annotations

import logging
import os


def configure(level: str | None = None) -> None:
    level = (level or os.environ.get("TOOLRELAY_LOG_LEVEL") or "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    # Per-request access lines and Celery's own chatter drown what matters at INFO.
    for noisy in ("uvicorn.access", "celery.worker.strategy", "celery.app.trace", "kombu", "alembic.runtime.migration",
                  "celery.worker.consumer.connection"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
