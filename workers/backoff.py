"""Retry delays: exponential backoff with a little jitter, never sooner than the tool asked."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """``initial * factor ** (attempt - 1)``, capped at ``maximum`` (DESIGN.md: 1 s, x2, 100 s)."""

    initial: float = 1.0
    factor: float = 2.0
    maximum: float = 100.0
    jitter: float = 0.1

    def delay(self, attempt: int, retry_after_ms: int | None = None) -> float:
        """Seconds to wait before the attempt after ``attempt`` (1-based)."""
        base = min(self.maximum, self.initial * self.factor ** max(0, attempt - 1))
        base *= 1 - self.jitter * random.random()
        if retry_after_ms is not None:
            base = max(base, retry_after_ms / 1000)
        return base
