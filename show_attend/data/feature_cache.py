"""Encoder features computed once and memory-mapped, for training on a frozen encoder.

With the encoder fixed (the paper's setting), an image's annotation vectors never change, so
running the CNN for every caption of every epoch is wasted work. :class:`FeatureCache` computes
each split's features once into ``<folder>/<split>-<tag>.npy`` and memory-maps it; batches then
carry ``features`` instead of ``images``.

A cache file is used only when it is the right one and whole:

* its tag hashes the fingerprint of the encoder's weights as they are when the features are
  needed (after a checkpoint's weights are restored), the image size and the split file, so
  another encoder, another checkpoint or other images never read stale features;
* it is written under a temporary name and renamed, then a metadata file is written last: a
  cache without its metadata, or whose file does not match it, is rebuilt, never read;
* features go in float16 (half the disk), unless a value does not fit float16's range, as with a
  randomly initialised encoder: then the split is stored in float32. A non-finite feature stops
  the build with a one-line error naming the image.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from shared.io.bad_samples import BadSample, drop_bad_samples

from show_attend.data.readers import CaptionRecord, DataError

from show_attend.data.images import ImageError, image_transform, load_image

__all__ = ["FeatureCache", "CachedSplit"]

_FORMAT_VERSION = 2  # part of every tag: files of an older layout are never read
_FLOAT16_MAX = float(np.finfo(np.float16).max)


class CachedSplit(NamedTuple):
    """One split's features `(N, L, D)` (memory-mapped) and the images that could not be read."""

    features: np.ndarray
    unreadable: dict[int, str]  # index into the split -> reason


class _Images(Dataset):
    """A split's images, transformed, as ``(index, image)``; unreadable ones as BadSample."""

    def __init__(self, records: list[CaptionRecord], transform: Callable):
        self.records, self.transform = records, transform

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int):
        path = self.records[index].path
        try:
            return index, self.transform(load_image(path))
        except ImageError as err:
            return BadSample(str(path), str(err).removeprefix(f"{path}: "))


def _collate(items: list) -> tuple[list[int], torch.Tensor | None, list[BadSample]]:
    good, bad = drop_bad_samples(items)
    if not good:
        return [], None, bad
    return [index for index, _ in good], torch.stack([image for _, image in good]), bad


class FeatureCache:
    """The cached features of one data set under one encoder.

    Args:
        folder (str or Path): where the files go.
        key (dict): plain data that the features depend on (the encoder's weight fingerprint,
            the image size, the split file); hashed into every file name.
    """

    def __init__(self, folder: str | Path, key: dict):
        self.folder = Path(folder)
        self.key = {**key, "format": _FORMAT_VERSION}
        self.tag = hashlib.sha1(json.dumps(self.key, sort_keys=True).encode()).hexdigest()[:12]

    def _paths(self, split: str) -> tuple[Path, Path]:
        return self.folder / f"{split}-{self.tag}.npy", self.folder / f"{split}-{self.tag}.json"

    def load(self, split: str, count: int) -> CachedSplit | None:
        """The split's cached features, or ``None`` when there is no finished, matching file."""
        features_path, meta_path = self._paths(split)
        try:
            meta = json.loads(meta_path.read_text())
            features = np.load(features_path, mmap_mode="r")
        except (OSError, ValueError):
            return None
        if meta.get("key") != self.key or meta.get("images") != count or list(features.shape) != meta.get("shape") \
                or str(features.dtype) != meta.get("dtype"):
            return None
        return CachedSplit(features, {int(i): reason for i, reason in meta.get("unreadable", {}).items()})

    @torch.no_grad()
    def write(
        self, split: str, records: list[CaptionRecord], encode: Callable[[torch.Tensor], torch.Tensor],
        image_size: int, device: torch.device | str, batch_size: int = 64, num_workers: int = 0,
    ) -> None:
        """Compute and store the features of ``records`` (see the module docstring).

        Args:
            split (str): the split's name, for the file name.
            records (list of CaptionRecord): the split's images, in dataset order.
            encode (callable): images `(B, 3, S, S)` on ``device`` -> features `(B, L, D)`.
            image_size (int): side the images are resized to, as in training.
            device: where ``encode`` runs.

        Raises:
            DataError: no image of the split could be read, or the encoder gave a non-finite value.
        """
        features_path, meta_path = self._paths(split)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path.unlink(missing_ok=True)  # from here on the old file, if any, is not finished
        partial = features_path.with_name(features_path.name + ".partial.npy")
        # Its own generator: a loader draws a seed when iterated, and building a cache must not move
        # the global one (the training run that follows would shuffle otherwise than without a cache).
        loader = DataLoader(_Images(records, image_transform(image_size)), batch_size=batch_size,
                            num_workers=num_workers, collate_fn=_collate, generator=torch.Generator())
        out, unreadable = None, {}
        index_of = {str(r.path): i for i, r in enumerate(records)}
        for indices, images, bad in loader:
            unreadable.update({index_of[b.path]: b.reason for b in bad})
            if images is None:
                continue
            features = encode(images.to(device)).float().cpu().numpy()  # (B, L, D)
            finite = np.isfinite(features).reshape(len(indices), -1).all(1)
            if not finite.all():
                raise DataError(
                    f"{records[indices[int(np.argmin(finite))]].path}: the encoder gave NaN or infinite features; "
                    f"check model.encoder (its weights file)"
                )
            if out is None:
                out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float16, shape=(len(records), *features.shape[1:]))
            if out.dtype == np.float16 and np.abs(features).max() > _FLOAT16_MAX:  # e.g. a random-weight encoder
                warnings.warn(f"{split} features exceed float16's range (|x| up to {np.abs(features).max():.3g}); "
                              f"caching the {split} split in float32, twice the disk")
                out = self._widen(out, partial)
            out[indices] = features
        if out is None:
            raise DataError(f"none of the {len(records)} {split} images could be read (the first: {records[0].path})")
        out.flush()
        shape, dtype = list(out.shape), str(out.dtype)
        del out
        partial.replace(features_path)
        # Unreadable images keep zero features; the metadata makes the dataset skip them like any bad file.
        meta = {"key": self.key, "images": len(records), "shape": shape, "dtype": dtype,
                "unreadable": {str(i): reason for i, reason in unreadable.items()}}
        meta_path.write_text(json.dumps(meta) + "\n")  # written last: it marks a finished cache

    @staticmethod
    def _widen(out: np.memmap, partial: Path) -> np.memmap:
        """The float16 file so far as a float32 one, in its place."""
        wider_path = partial.with_name(partial.name + ".f32.npy")
        wider = np.lib.format.open_memmap(wider_path, mode="w+", dtype=np.float32, shape=out.shape)
        wider[:] = out
        del out
        wider.flush()
        wider_path.replace(partial)
        return np.load(partial, mmap_mode="r+")
