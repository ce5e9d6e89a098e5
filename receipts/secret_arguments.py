"""Secrets in a call's arguments: found by the tool's JSON Schema, stored encrypted, shown masked.

A property whose schema says ``"writeOnly": true`` or ``"format": "password"`` (pydantic's
``SecretStr`` says both) holds a secret, at any depth: nested objects, arrays of objects, ``$ref``
to ``$defs``, the branches of ``anyOf``/``oneOf``/``allOf``. When a call is accepted its arguments
are split in two: ``input`` keeps them with every secret replaced by :data:`MASK` (so receipts,
timelines, lists, webhook payloads and a model's messages all show the mask: they are rendered from
``input``), and the secrets alone, with where they go, are encrypted with ``TOOLRELAY_SECRET_KEY``
into the receipt's ``secret_input`` column. Only a worker's claim reads that column; the worker
merges the secrets back (:func:`reveal`) just before calling the tool, and masks them out of what
the tool returns or raises (:func:`scrub`), so a tool that echoes a secret does not leak it.

Schema errors about a secret never repeat its value (:func:`SecretFields.hide_in_errors`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MASK = "********"
# A secret shorter than this is masked where it is a whole string of a result, not inside longer text
# (masking every "ab" in a tool's output would garble it and hide nothing).
MIN_SUBSTRING = 4
MAX_REF_DEPTH = 32

Path = tuple[str | int, ...]
Schema = Mapping[str, Any]


def marks_secret(schema: Schema) -> bool:
    """Whether this schema (not its children) declares a secret."""
    return schema.get("writeOnly") is True or schema.get("format") == "password"


def _mentions_secret(node: Any) -> bool:
    """Whether any schema inside ``node`` declares a secret (a quick test that spares most tools a walk)."""
    if isinstance(node, Mapping):
        return marks_secret(node) or any(_mentions_secret(value) for value in node.values())
    if isinstance(node, list):
        return any(_mentions_secret(item) for item in node)
    return False


@dataclass(frozen=True, slots=True)
class Split:
    """Arguments with their secrets masked, and the secrets: ``(path, value)`` pairs in document order."""

    masked: Any
    secrets: list[tuple[Path, Any]]


class SecretFields:
    """Where a tool's argument schema puts secrets. Build it with :meth:`of` (None: the schema has none)."""

    def __init__(self, root: Schema) -> None:
        self.root = root

    @classmethod
    def of(cls, schema: Schema) -> SecretFields | None:
        return cls(schema) if _mentions_secret(schema) else None

    # -- the schema's structure ----------------------------------------------------------------

    def _resolve(self, ref: str) -> Schema | None:
        """A local ``$ref`` (``#/$defs/Card``); None for one that points elsewhere or nowhere."""
        if not ref.startswith("#"):
            return None
        node: Any = self.root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node if isinstance(node, Mapping) else None

    def _expand(self, schemas: Sequence[Any]) -> list[Schema]:
        """The schemas that apply to one value: these, their ``$ref`` targets and their combinators' branches."""
        found: list[Schema] = []
        seen: set[int] = set()
        pending = [(schema, 0) for schema in schemas]
        while pending:
            schema, depth = pending.pop()
            if not isinstance(schema, Mapping) or id(schema) in seen or depth > MAX_REF_DEPTH:
                continue
            seen.add(id(schema))
            found.append(schema)
            ref = schema.get("$ref")
            if isinstance(ref, str):
                target = self._resolve(ref)
                if target is not None:
                    pending.append((target, depth + 1))
            for keyword in ("allOf", "anyOf", "oneOf"):
                branches = schema.get(keyword)
                if isinstance(branches, list):
                    pending.extend((branch, depth + 1) for branch in branches)
            for keyword in ("then", "else"):
                if isinstance(schema.get(keyword), Mapping):
                    pending.append((schema[keyword], depth + 1))
        return found

    @staticmethod
    def _for_key(schemas: list[Schema], key: str) -> list[Any]:
        """The schemas of an object's property ``key``."""
        found: list[Any] = []
        for schema in schemas:
            properties = schema.get("properties")
            matched = False
            if isinstance(properties, Mapping) and key in properties:
                found.append(properties[key])
                matched = True
            patterns = schema.get("patternProperties")
            if isinstance(patterns, Mapping):
                for pattern, sub in patterns.items():
                    try:
                        if re.search(pattern, key):
                            found.append(sub)
                            matched = True
                    except re.error:
                        continue
            if not matched and isinstance(schema.get("additionalProperties"), Mapping):
                found.append(schema["additionalProperties"])
        return found

    @staticmethod
    def _for_index(schemas: list[Schema], index: int) -> list[Any]:
        """The schemas of an array's item at ``index``."""
        found: list[Any] = []
        for schema in schemas:
            prefix = schema.get("prefixItems")
            items = schema.get("items")
            if isinstance(prefix, list) and index < len(prefix):
                found.append(prefix[index])
            elif isinstance(items, list):  # draft 7's tuple form
                if index < len(items):
                    found.append(items[index])
                elif isinstance(schema.get("additionalItems"), Mapping):
                    found.append(schema["additionalItems"])
            elif isinstance(items, Mapping):
                found.append(items)
        return found

    # -- the arguments -------------------------------------------------------------------------

    def split(self, arguments: Any) -> Split:
        """``arguments`` with every secret masked, and the secrets with their paths."""
        secrets: list[tuple[Path, Any]] = []

        def walk(schemas: Sequence[Any], value: Any, path: Path) -> Any:
            expanded = self._expand(schemas)
            if any(marks_secret(schema) for schema in expanded):
                if value is None:  # an optional secret left out: nothing to hide
                    return None
                secrets.append((path, value))
                return MASK
            if isinstance(value, dict):
                return {key: walk(self._for_key(expanded, str(key)), item, (*path, key))
                        for key, item in value.items()}
            if isinstance(value, list):
                return [walk(self._for_index(expanded, index), item, (*path, index))
                        for index, item in enumerate(value)]
            return value

        masked = walk([self.root], arguments, ())
        return Split(masked, secrets)

    def mask(self, arguments: Any) -> Any:
        """``arguments`` with every secret masked (for a call that will not run, so nothing is kept)."""
        return self.split(arguments).masked

    def hide_in_errors(self, arguments: Any, errors: list[dict[str, str]], prefix: str) -> list[dict[str, str]]:
        """Schema errors (``{field, message}``, fields under ``prefix``) that repeat no secret of ``arguments``.

        An error on a secret, or inside one, says which rule failed without the value; any other error
        whose message quotes a secret (a parent object's ``anyOf`` failure prints the whole object) is
        reworded the same way.
        """
        secrets = self.split(arguments).secrets
        if not secrets:
            return errors
        fields = {".".join([prefix, *map(str, path)]) for path, _ in secrets}
        texts = [text for text in _strings(value for _, value in secrets) if text]
        hidden = []
        for err in errors:
            field = err["field"]
            inside = any(field == secret or field.startswith(secret + ".") for secret in fields)
            if inside or any(text in err["message"] for text in texts):
                err = {**err, "message": "does not match the schema (the value is a secret and is not shown)"}
            hidden.append(err)
        return hidden


def _strings(values: Iterator[Any]) -> Iterator[str]:
    """Every string inside ``values``, and the JSON form of the numbers among them."""
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict | list):
            yield from _strings(iter(value.values() if isinstance(value, dict) else value))
        elif value is not None and not isinstance(value, bool):
            yield json.dumps(value)


def reveal(masked: Any, secrets: Sequence[tuple[Sequence[str | int], Any]]) -> Any:
    """``masked`` with each secret put back at its path (the arguments as the caller sent them)."""
    if not secrets:
        return masked
    result = json.loads(json.dumps(masked))  # a deep copy: the receipt's input stays masked
    for path, value in secrets:
        if not path:
            return value
        node = result
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    return result


def scrub(value: Any, secrets: Sequence[tuple[Sequence[str | int], Any]]) -> Any:
    """``value`` (a tool's output or error) with the secrets' text masked wherever it appears."""
    texts = sorted({text for text in _strings(secret for _, secret in secrets) if text}, key=len, reverse=True)
    if not texts:
        return value

    def clean(item: Any) -> Any:
        if isinstance(item, str):
            if item in texts:
                return MASK
            for text in texts:
                if len(text) >= MIN_SUBSTRING and text in item:
                    item = item.replace(text, MASK)
            return item
        if isinstance(item, dict):
            return {clean(key) if isinstance(key, str) else key: clean(sub) for key, sub in item.items()}
        if isinstance(item, list | tuple):
            return [clean(sub) for sub in item]
        return item

    return clean(value)


def fingerprint_part(secret_key: str, secrets: Sequence[tuple[Path, Any]]) -> str:
    """What a call's secrets add to its idempotency fingerprint: a keyed hash, so a replay with the same
    secret matches and one with another does not, while the stored hash reveals nothing about it."""
    canonical = json.dumps([[list(path), value] for path, value in secrets], sort_keys=True, default=str)
    return hmac.new(secret_key.encode(), canonical.encode(), hashlib.sha256).hexdigest()
