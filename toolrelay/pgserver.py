"""Placeholder until the embedded server lands (replaced by toolrelay/pgserver.py from its branch)."""

from __future__ import annotations

from pathlib import Path


class EmbeddedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def summary(self) -> str:
        return ""
