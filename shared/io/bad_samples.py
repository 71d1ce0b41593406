"""Markers for items a dataset could not read, so one bad file does not end an epoch.

A dataset's ``__getitem__`` returns a :class:`BadSample` instead of raising when one file
cannot be read. The collate function calls :func:`drop_bad_samples`, which removes them and
hands their paths on with the batch (they may be in a worker process, so nothing is counted
there); :class:`shared.training.guards.SkipBadSamples`, in the training process, counts and
logs them. No Lightning here: the apps' data readers import this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["BadSample", "drop_bad_samples"]


class BadSample(NamedTuple):
    """Stands in for an item that could not be loaded (a tuple, so batch transfer passes it through)."""

    path: str
    reason: str


def drop_bad_samples(items: Sequence[Any]) -> tuple[list[Any], list[BadSample]]:
    """Split a list of dataset items into the good ones and the :class:`BadSample` markers."""
    good = [item for item in items if not isinstance(item, BadSample)]
    bad = [item for item in items if isinstance(item, BadSample)]
    return good, bad
