"""Serving a shard split: training batches streamed by LitData with a resumable position, and
evaluation items by index.

Training (:class:`ShardStream`)
    A ``litdata.StreamingDataset`` shuffles the split's chunks, and the items within them, anew
    each epoch and gives each rank its own chunks, the same number of items on every rank
    (LitData drops the few left over under DDP). A ``litdata.StreamingDataLoader`` hands over
    *windows* of ``window`` items, read and decoded in its worker processes by the app's
    ``decode``. The app's ``plan`` cuts a window into batches (the recognizer sorts it by duration
    and fills each batch up to a frame budget, as NeMo and Lhotse bucket within a buffer); when that
    count can differ between ranks, the ranks agree on the largest, one number per window over a
    gloo group, and a rank with fewer splits its largest batches, or adds empty ones, so every rank
    takes the same number of steps and none waits for the others at the end of an epoch. An item
    that cannot be decoded comes back as a :class:`~shared.io.bad_samples.BadSample` and rides
    with the window's first batch, to be logged by the training loop.

    The position is the LitData loader's state before the current window (its ``state_dict``),
    the window's number and the batches of it already trained on, counted when the training
    loop takes a batch (:meth:`ShardStream.mark_consumed`, called by the data modules), not
    when it is made: Lightning reads one batch ahead. Lightning saves ``state_dict()`` in every
    checkpoint and gives it back on ``fit --ckpt_path`` for a run stopped mid-epoch; the window is
    read again, cut the same way, and the batches already trained on are skipped, so the epoch
    goes on from the next unseen sample.

Evaluation (:class:`ShardItems`)
    Validation and test read their split in order, by index, as a map-style dataset: each rank
    its share through the same samplers as the file readers, so metrics over N GPUs are those of one.
"""

from __future__ import annotations

import copy
import random
import struct
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset

from shared.io.bad_samples import BadSample

from .layout import UNREADABLE, ShardError, require_litdata

require_litdata()
from litdata import StreamingDataLoader, StreamingDataset  # noqa: E402

__all__ = ["ShardStream", "ShardItems", "equal_counts"]


class _Split(StreamingDataset):
    """A split's items; one that LitData cannot read back (a chunk changed in place) comes as
    ``{"unreadable": reason, "where": ...}`` for the app's ``decode`` to turn into a ``BadSample``."""

    def __getitem__(self, index):
        try:
            return super().__getitem__(index)
        except (OSError, ValueError, RuntimeError, KeyError, IndexError, EOFError, struct.error) as err:
            number = getattr(index, "index", index)
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            return {UNREADABLE: reason, "where": f"{self.input_dir.url or self.input_dir.path} item {number}"}


class _DecodeWindow:
    """The loader processes' collate: a window of stored items -> the app's decoded items."""

    def __init__(self, decode: Callable[[dict, int], Any]):
        self.decode, self.epoch = decode, 0

    def __call__(self, items: list[dict]) -> list[Any]:
        return [self.decode(item, self.epoch) for item in items]


_GROUPS: dict[int, Any] = {}


def equal_counts() -> Callable[[int], int] | None:
    """Under DDP, a function that returns the largest of the numbers each rank gives it (one
    all-reduce on a gloo group of its own, apart from the training's collectives); ``None`` alone.

    Every rank must create it at the same moment (the data modules do when their training loader
    is made, which Lightning asks of every rank).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    key = id(dist.group.WORLD)
    if key not in _GROUPS:
        _GROUPS[key] = dist.new_group(backend="gloo")
    group = _GROUPS[key]

    def most(count: int) -> int:
        value = torch.tensor([count], dtype=torch.long)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
        return int(value)

    return most


def _equalize(batches: list[list], count: int) -> list[list]:
    """``batches`` made ``count`` long: the largest batch split in two (neighbours in length stay
    together), while one has two items; then empty batches."""
    batches = list(batches)
    while len(batches) < count:
        largest = max(range(len(batches)), key=lambda i: len(batches[i]), default=None)
        if largest is None or len(batches[largest]) < 2:
            batches.append([])
            continue
        half = batches[largest]
        batches[largest : largest + 1] = [half[: len(half) // 2], half[len(half) // 2 :]]
    return batches


class ShardStream:
    """Training batches from one shard split, resumable mid-epoch (module docstring).

    Args:
        location (str): the split's folder or URL (:meth:`shared.io.shards.layout.Shards.split_location`).
        window (int): items read and decoded together, then cut into batches.
        decode (callable): ``(item, epoch) -> decoded item``, a ``BadSample``, or ``None`` for an item
            left out; runs in the loader processes, so it must be picklable (a module-level function
            or a ``functools.partial``).
        plan (callable): ``(decoded items, random.Random) -> list of batches`` (lists of items).
        collate (callable): a batch's items (with the window's ``BadSample`` markers) -> the batch
            the module trains on.
        fingerprint (str): the shards' fingerprint; a position saved in other shards is refused.
        seed (int, optional): seed of LitData's shuffling and of ``plan``. (Default: ``0``)
        num_workers (int, optional): loader processes that read and decode. (Default: ``0``)
        fixed (bool, optional): ``plan`` always makes one batch of the window, so the number of
            batches is known in advance (``len``) and the ranks need not agree. (Default: ``False``)
        rank (int, optional): this process's rank, for ``plan``'s random order. (Default: ``0``)
        agree (callable or None, optional): :func:`equal_counts`, where the batch count of a window
            may differ between ranks. (Default: ``None``)
    """

    def __init__(
        self,
        location: str,
        window: int,
        decode: Callable[[dict, int], Any],
        plan: Callable[[list, random.Random], list[list]],
        collate: Callable[[list], Any],
        fingerprint: str,
        seed: int = 0,
        num_workers: int = 0,
        fixed: bool = False,
        rank: int = 0,
        agree: Callable[[int], int] | None = None,
    ):
        if window < 1:
            raise ValueError(f"the window must hold at least one item, got {window}")
        self.location, self.window, self.plan, self.collate = location, window, plan, collate
        self.fingerprint, self.seed, self.fixed, self.rank, self.agree = fingerprint, seed, fixed, rank, agree
        self.items = _Split(location, shuffle=True, seed=seed)
        self._decode = _DecodeWindow(decode)
        self.loader = StreamingDataLoader(self.items, batch_size=window, num_workers=num_workers, collate_fn=self._decode)
        self._epoch = 0  # set by Lightning (and ExactResume) through .sampler.set_epoch
        self._pending: dict | None = None  # a position from a checkpoint, used by the next iteration
        self._yielded: deque[tuple] = deque()  # positions after each batch handed out, not yet trained on
        self._position: dict = {"epoch": 0, "window": None, "window_index": 0, "batches": 0, "complete": False}

    # ------------------------------------------------------------------ epochs and length

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration serves (its own shuffle of chunks and items)."""
        self._epoch = epoch

    @property
    def sampler(self) -> ShardStream:
        # Lightning and ExactResume tell a loader's ``sampler`` the epoch.
        return self

    def __len__(self) -> int:
        if not self.fixed:
            raise TypeError("the number of batches of an epoch of duration buckets is known only at its end")
        return len(self.loader)

    # ------------------------------------------------------------------ position

    def mark_consumed(self) -> None:
        """The oldest batch handed out is being trained on: a checkpoint from now on starts after it."""
        if self._yielded:
            epoch, state, window_index, batches, complete = self._yielded.popleft()
            # with a length, Lightning asks for no batch past the last, so the end is counted here
            complete = complete or (self.fixed and window_index >= len(self) - 1)
            self._position = {
                "epoch": epoch,
                "window": state,
                "window_index": window_index,
                "batches": batches,
                "complete": complete,
            }

    def _layout(self) -> dict[str, int]:
        """The ranks and loader processes a position holds for: each reads its own windows."""
        ranks = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        return {"ranks": ranks, "workers": self.loader.num_workers}

    def state_dict(self) -> dict[str, Any]:
        """Where the epoch stands: the LitData loader's state before the current window, the window's
        number, the batches of it trained on; ``complete`` once the epoch's last batch was taken."""
        return {"fingerprint": self.fingerprint, **self._layout(), **self._position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (from a checkpoint) at the next iteration.

        Raises:
            ShardError: the position was saved while reading other shards.
        """
        if state.get("fingerprint") != self.fingerprint:
            raise ShardError(
                f"{self.location}: the checkpoint's data position is in other shards (fingerprint "
                f"{str(state.get('fingerprint'))[:12]}, these are {self.fingerprint[:12]}); expected the shards the run was "
                "trained on"
            )
        layout = self._layout()
        saved = {key: state.get(key) for key in layout}
        if state.get("complete"):
            self._pending = None
        elif saved != layout:  # other ranks or loader processes read other windows: the position means nothing here
            warnings.warn(
                f"{self.location}: the checkpoint's data position was saved with {saved['ranks']} ranks and "
                f"{saved['workers']} loader processes, this run has {layout['ranks']} and {layout['workers']}; "
                f"epoch {state['epoch']} starts again from its first batch",
                stacklevel=2,
            )
            self._pending = {**state, "window": None, "window_index": 0, "batches": 0}
        else:
            self._pending = dict(state)

    # ------------------------------------------------------------------ batches

    def _batches(self, items: list, epoch: int, window_index: int) -> list[list]:
        rng = random.Random(f"{self.seed}/{epoch}/{window_index}/{self.rank}")
        good = [item for item in items if item is not None and not isinstance(item, BadSample)]  # None: left out
        bad = [item for item in items if isinstance(item, BadSample)]
        batches = self.plan(good, rng) if good else []
        if self.fixed:
            batches = batches or [[]]
        elif self.agree is not None:
            batches = _equalize(batches, self.agree(len(batches)))
        if not self.fixed:
            rng.shuffle(batches)
        if bad:
            batches = batches or [[]]
            batches[0] = [*batches[0], *bad]
        return batches

    def __iter__(self) -> Iterator[Any]:
        pending, self._pending = self._pending, None
        self._yielded.clear()
        if pending is not None:  # from a checkpoint: the window it was in, and the batches of it already taken
            epoch, state, window_index, skip = pending["epoch"], pending["window"], pending["window_index"], pending["batches"]
        else:
            epoch, state, window_index, skip = self._epoch, None, 0, 0
        if state is not None:
            state = copy.deepcopy(state)  # LitData updates the dict it is given, and returns it as its later states
            self.loader.load_state_dict(copy.deepcopy(state))
        else:  # the epoch's first window
            self.loader.current_epoch = epoch  # LitData's own count: it starts epoch + 1, each epoch its own order
            self.loader.restore = False  # an earlier resumed epoch that was cut short must not be resumed again
        self._decode.epoch = epoch
        self._position = {"epoch": epoch, "window": state, "window_index": window_index, "batches": skip, "complete": False}
        for items in self.loader:
            batches = self._batches(items, epoch, window_index)
            for j in range(skip, len(batches)):
                self._yielded.append((epoch, state, window_index, j + 1, False))
                yield self.collate(batches[j])
            skip = 0
            window_index += 1
            state = copy.deepcopy(self.loader.state_dict())  # after a resume LitData returns one dict, updated in place
        if self._yielded:  # the last batch handed out closes the epoch
            epoch_, state_, window_, batches_, _ = self._yielded.pop()
            self._yielded.append((epoch_, state_, window_, batches_, True))
        else:
            self._position = {**self._position, "complete": True}


class ShardItems(Dataset):
    """One shard split as a map-style dataset: item ``i`` decoded, for validation and test.

    Args:
        location (str): the split's folder or URL.
        decode (callable): ``(item, epoch) -> decoded item``, a ``BadSample`` or ``None`` (epoch 0).
        count (int): the items served, the first of the split (its marker's ``items`` for all:
            LitData's own length is a rank's share under DDP).
    """

    def __init__(self, location: str, decode: Callable[[dict, int], Any], count: int):
        self.location, self.decode, self.count = location, decode, count
        self.items = _Split(location, shuffle=False)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < self.count:
            raise IndexError(f"item {index} of a split of {self.count}")
        return self.decode(self.items[index], 0)
