"""Dataclass configs from the plain dicts that checkpoints and exported models store.

Checkpoints keep hyper-parameters as plain data (so they load with ``weights_only=True``);
:func:`as_dataclass` turns such a dict back into the config object, refusing unknown fields
so that a typo in a YAML file or a config from another model is an error, not a silent default.
:func:`with_settings` is a config with some of its settings replaced: a model's decoding
settings with those a user gives at inference (``caption --beam-size``, ``Transcriber.load(...,
ctc_weight=0.2)``).

Both apps keep their settings one level deep: a model's hyper-parameters hold one config per part
or concern under its own key (``encoder``, ``decoder``, ``decoding``; ``las``, ``features``,
``decoding``), each a dict of plain values, as the YAML files name them (``model.decoding.beam_size``).
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Any, TypeVar

__all__ = ["as_dataclass", "with_settings"]

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


def with_settings(config: T, **settings: Any) -> T:
    """``config`` with the given settings replaced; a setting of ``None`` keeps the config's.

    Args:
        config: a dataclass instance.
        **settings: field names and their new values.

    Raises:
        ValueError: a name that is not one of the config's fields, or a value it refuses.
    """
    names = {f.name for f in fields(config)}
    unknown = sorted(set(settings) - names)
    if unknown:
        raise ValueError(f"unknown {type(config).__name__} settings {unknown}; expected some of {sorted(names)}")
    return replace(config, **{name: value for name, value in settings.items() if value is not None})
