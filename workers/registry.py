"""The ``@tool`` decorator and the registry of Python tools a worker process can run.

``@tool`` only marks a function (it stores a :class:`PythonTool` on it); nothing global changes
at import time. A worker builds a :class:`Registry` from the built-in tools and the modules named in
``TOOLRELAY_TOOL_MODULES``, and publishes their specs to the catalogue in the database.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from receipts.catalogue.tools import check_name
from receipts.records import ToolSpec
from workers.schema import ArgumentModel, build_arguments

MARK = "__toolrelay_tool__"
DEFAULT_QUEUE = "tools"


@dataclass(frozen=True)
class PythonTool:
    """A registered Python function and its catalogue entry."""

    spec: ToolSpec
    fn: Callable[..., Any]
    arguments: ArgumentModel

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Literal["read", "write"] | None = None,
    idempotent: bool | None = None,
    timeout_s: float = 30.0,
    max_attempts: int = 3,
    queue: str = DEFAULT_QUEUE,
    parameters: dict[str, Any] | None = None,
    requires_approval: bool = False,
    approval_timeout_s: float | None = None,
) -> Any:
    """Make a function a toolrelay tool.

    The name defaults to the function's, the description to its docstring, the JSON Schema of its
    arguments to one built from the type hints. ``requires_approval=True``: each call waits for a
    person's approval (``POST /v1/receipts/{id}/approve``) before it runs, for at most
    ``approval_timeout_s`` (default ``TOOLRELAY_APPROVAL_TIMEOUT_S``, 24 h).

    The contract is what the tool declares, read the safe way (DESIGN.md, guarantee 3): a tool that
    declares neither ``effect`` nor ``idempotent`` is a non-idempotent write, so it is never run twice
    automatically (no retry, ``outcome_unknown`` when its worker dies mid-run). ``effect="read"`` is
    idempotent unless said otherwise; ``effect="write"`` is not; ``idempotent=`` alone keeps the
    effect a write.

    Example::

        @tool(effect="write", idempotent=False, timeout_s=10)
        def send_sms(to: str, text: str) -> dict:
            \"\"\"Send a text message.\"\"\"
    """

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        tool_name = name or func.__name__
        check_name(tool_name)
        arguments = build_arguments(func, parameters)
        spec = ToolSpec(
            name=tool_name,
            kind="python",
            description=(description or inspect.getdoc(func) or "").strip(),
            parameters=arguments.schema,
            effect=effect or "write",
            idempotent=(effect == "read") if idempotent is None else idempotent,
            timeout_s=float(timeout_s),
            max_attempts=max_attempts,
            queue=queue,
            requires_approval=requires_approval,
            approval_timeout_s=approval_timeout_s,
        )
        setattr(func, MARK, PythonTool(spec=spec, fn=func, arguments=arguments))
        return func

    return mark(fn) if fn is not None else mark


class Registry:
    """The Python tools one worker process can run, by name."""

    def __init__(self, tools: Iterable[PythonTool] = ()) -> None:
        self._tools: dict[str, PythonTool] = {}
        for item in tools:
            self.add(item)

    def add(self, item: PythonTool) -> None:
        self._tools[item.spec.name] = item

    def add_module(self, module: ModuleType) -> int:
        """Register every ``@tool`` function defined in ``module``; returns how many."""
        found = [getattr(obj, MARK) for obj in vars(module).values() if hasattr(obj, MARK)]
        for item in found:
            self.add(item)
        return len(found)

    def get(self, name: str) -> PythonTool | None:
        return self._tools.get(name)

    def specs(self) -> list[ToolSpec]:
        return [item.spec for item in self._tools.values()]

    def queues(self) -> set[str]:
        return {item.spec.queue for item in self._tools.values()}


def load_registry(modules: Iterable[str]) -> Registry:
    """The built-in tools plus the ``@tool`` functions of each named module."""
    from workers import builtin

    registry = Registry()
    registry.add_module(builtin)
    for module_name in modules:
        registry.add_module(importlib.import_module(module_name))
    return registry
