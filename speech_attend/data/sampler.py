"""Length-bucketed batches: similar lengths together, so little of each batch is padding.

Each epoch the items are sorted by length (ties broken at random), cut into batches of at
most ``batch_size`` items and, if set, at most ``max_frames`` padded frames
(``len(batch) * longest``), and the batches are shuffled. Under DDP every rank builds the same
list from the same seed and takes every ``world_size``-th batch (so under a curriculum the
ranks go from short to long together); the list is first made a
multiple of ``world_size`` long by splitting the largest batches, so each rank runs the same
number of steps, the ranks' batches are disjoint, and together they hold every item once.
The shuffle moves runs of ``world_size`` neighbouring batches as one, so the ranks' batches of
one step have nearly the same length: a step lasts as long as its slowest rank, and batches
paired at random would leave the faster rank waiting.
"""

from __future__ import annotations

import math
import random
from typing import Iterator, Sequence

from torch.utils.data import Sampler

__all__ = ["BucketBatchSampler"]


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of dataset indices grouped by length.

    Args:
        lengths (Sequence[int]): length of each item (e.g. feature frames or samples).
        batch_size (int): most items per batch.
        max_frames (int or None, optional): most padded frames per batch, in the unit of
            ``lengths``; an item longer than this gets a batch of its own. (Default: ``None``)
        shuffle (bool, optional): random tie-breaking and batch order, new each epoch;
            ``False`` gives a fixed order (for evaluation). (Default: ``True``)
        seed (int, optional): the same on every rank. (Default: ``0``)
        num_replicas (int, optional): DDP world size. (Default: ``1``)
        rank (int, optional): this process's rank. (Default: ``0``)
        curriculum_epochs (int, optional): for this many first epochs the batches go from the
            shortest to the longest instead of in random order (SortaGrad, Amodei et al. 2016):
            alignments form first on short utterances, which are also the cheapest. (Default: ``0``)
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        max_frames: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        curriculum_epochs: int = 0,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_frames is not None and max_frames < 1:
            raise ValueError(f"max_frames must be >= 1 or None, got {max_frames}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        if len(lengths) < num_replicas:
            raise ValueError(f"{len(lengths)} items cannot be shared by {num_replicas} ranks")
        self.lengths = [int(n) for n in lengths]
        self.batch_size, self.max_frames = batch_size, max_frames
        self.shuffle, self.seed = shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.curriculum_epochs = curriculum_epochs
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch's permutation (the same on every rank)."""
        self.epoch = epoch

    @property
    def sampler(self) -> "BucketBatchSampler":
        # Lightning calls set_epoch on ``dataloader.batch_sampler.sampler`` every epoch.
        return self

    def _fits(self, count: int, longest: int) -> bool:
        return count <= self.batch_size and (self.max_frames is None or count * longest <= self.max_frames)

    def _all_batches(self) -> list[list[int]]:
        rng = random.Random(f"{self.seed}/{self.epoch}")
        ties = [rng.random() for _ in self.lengths] if self.shuffle else range(len(self.lengths))
        order = sorted(range(len(self.lengths)), key=lambda i: (self.lengths[i], ties[i]))
        batches: list[list[int]] = []
        batch: list[int] = []
        for index in order:  # ascending lengths, so the newest item is the batch's longest
            if batch and not self._fits(len(batch) + 1, self.lengths[index]):
                batches.append(batch)
                batch = []
            batch.append(index)
        if batch:
            batches.append(batch)
        while len(batches) % self.num_replicas:  # equal steps per rank without repeating items
            largest = max(range(len(batches)), key=lambda i: len(batches[i]))
            if len(batches[largest]) < 2:
                break  # unreachable while there are at least num_replicas items
            half = batches[largest]
            batches[largest : largest + 1] = [half[: len(half) // 2], half[len(half) // 2 :]]
        if self.shuffle and self.epoch >= self.curriculum_epochs:
            steps = [batches[i : i + self.num_replicas] for i in range(0, len(batches), self.num_replicas)]
            rng.shuffle(steps)  # one step's batches stay neighbours in length
            batches = [batch for step in steps for batch in step]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        yield from self._all_batches()[self.rank :: self.num_replicas]

    def __len__(self) -> int:
        return math.ceil(len(self._all_batches()) / self.num_replicas)
