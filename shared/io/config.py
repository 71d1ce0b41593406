"""Dataclass configs from the plain dicts that checkpoints and exported models store.

Checkpoints keep hyper-parameters as plain data (so they load with ``weights_only=True``);
:func:`as_dataclass` turns such a dict back into the config object, refusing unknown fields
so that a typo in a YAML file or a config from another model is an error, not a silent default.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

__all__ = ["as_dataclass"]

T = TypeVar("T")


def as_dataclass(cls: type[T], value: Any) -> T:
    """A ``cls`` instance from an instance, a plain dict, or ``None`` (the defaults).

    Args:
        cls (type): a dataclass.
        value: ``cls`` instance, dict of its fields, or ``None``.

    Raises:
        ValueError: ``value`` has fields ``cls`` does not know, or is of another type.
    """
    if not is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        unknown = set(value) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}; expected some of {[f.name for f in fields(cls)]}")
        return cls(**value)
    raise ValueError(f"expected a {cls.__name__} or a dict of its fields, got {type(value).__name__}")
