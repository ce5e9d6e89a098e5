"""JSON Schema for a tool's arguments, built from its signature with pydantic, and argument binding."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from workers.context import ToolContext
from workers.errors import InvalidArguments


@dataclass(frozen=True)
class ArgumentModel:
    """Turns a call's JSON arguments into the keyword arguments of the function."""

    schema: dict[str, Any]
    model: type[BaseModel] | None
    context_param: str | None

    def bind(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """Validate and convert ``arguments`` (pydantic coercion: ISO strings to datetimes, ...)."""
        if self.model is None:
            kwargs = dict(arguments)
        else:
            try:
                parsed = self.model.model_validate(arguments)
            except ValidationError as exc:
                raise InvalidArguments(
                    "arguments do not match the tool's parameters",
                    details={"errors": [{"field": ".".join(map(str, e["loc"])), "message": e["msg"]}
                                        for e in exc.errors()]},
                ) from exc
            kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
            kwargs.update(parsed.model_extra or {})
        if self.context_param:
            kwargs[self.context_param] = context
        return kwargs


def build_arguments(fn: Callable[..., Any], parameters: dict[str, Any] | None = None) -> ArgumentModel:
    """The argument model of ``fn``; ``parameters`` overrides the schema (the function then gets the raw values)."""
    hints = get_type_hints(fn)
    signature = inspect.signature(fn)
    context_param = next((n for n in signature.parameters if hints.get(n) is ToolContext), None)
    if parameters is not None:
        return ArgumentModel(schema=parameters, model=None, context_param=context_param)

    fields: dict[str, Any] = {}
    extra: Literal["allow", "forbid"] = "forbid"
    for param_name, param in signature.parameters.items():
        if param_name == context_param:
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            extra = "allow"
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"{fn.__name__}: *args cannot be a tool argument")
        annotation = hints.get(param_name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param_name] = (annotation, default)
    model = create_model(  # type: ignore[call-overload]
        f"{fn.__name__}_arguments", __config__=ConfigDict(extra=extra), **fields
    )
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return ArgumentModel(schema=schema, model=model, context_param=context_param)
