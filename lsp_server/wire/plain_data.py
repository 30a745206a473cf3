"""pygls and lsprotocol objects → plain dicts and lists, for handlers, clients and JSON."""

from __future__ import annotations

from typing import Any

import attrs


def plain_data(value: Any) -> Any:
    """Custom messages arrive as pygls `Object`s (namedtuples), typed ones as attrs classes;
    both become dicts, recursively. Lists, tuples and dicts are walked; anything else is
    returned as it is."""
    if hasattr(value, "_asdict"):  # a namedtuple: check it before tuple
        return {k: plain_data(v) for k, v in value._asdict().items()}
    if attrs.has(type(value)):
        return {f.name: plain_data(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_data(v) for k, v in value.items()}
    return value
