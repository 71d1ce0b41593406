"""The pretrained listener's frozen states, computed once and memory-mapped, for training on top of it.

With Whisper's encoder frozen (:mod:`speech_attend.model.pretrained_listener`), its states are a
fixed function of the audio, so running it for every utterance of every epoch is wasted work, as
running a frozen CNN for every caption is (:mod:`show_attend.data.feature_cache`). A split's
states go once into ``<folder>/<split>-<tag>.f16`` (every utterance's states, one after another,
float16, `(S, d)`), with ``<split>-<tag>.json`` beside it; batches then carry ``encoded`` states
instead of audio.

Training conditions cannot be drawn per batch over cached states, so they are drawn when the cache
is written: ``views`` copies of each utterance, view 0 the audio as it is and each further view
the audio under the training conditions (:func:`speech_attend.data.augment.augment_batch`, from a
seeded generator), and the training loader serves one view per utterance, drawn afresh each time.

A cache file is read only when it is the right one and whole: its tag hashes what the states depend
on (the frozen weights' fingerprint and cache point, the front end, the utterances, the views and
their conditions), the states are written under a temporary name and renamed, and the metadata is
written last. A non-finite state stops the build with a one-line error naming the utterance.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from shared.io.bad_samples import BadSample

from speech_attend.data.audio import AudioError
from speech_attend.data.augment import AugmentConfig, augment_batch
from speech_attend.data.dataset import SpeechDataset, pad_waves

__all__ = ["EncoderCache", "CachedStates", "CachedSpeechDataset", "Encode"]

_FORMAT_VERSION = 1  # part of every tag: files of an older layout are never read
_FLOAT16_MAX = float(np.finfo(np.float16).max)
Encode = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # waveforms, lengths -> states, lengths


class CachedStates(NamedTuple):
    """One split's states: ``states`` `(S, d)` (memory-mapped), and where each view of each
    utterance lies in it, ``starts`` and ``lengths`` `(views, N)`; unreadable utterances have length 0."""

    states: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    unreadable: dict[int, str]

    @property
    def views(self) -> int:
        return self.starts.shape[0]

    def get(self, view: int, index: int) -> torch.Tensor:
        """The states `(L, d)` of one view of one utterance (float16)."""
        start, length = int(self.starts[view, index]), int(self.lengths[view, index])
        return torch.from_numpy(np.array(self.states[start : start + length]))


class EncoderCache:
    """The cached states of one corpus's splits under one frozen encoder.

    Args:
        folder (str or Path): where the files go.
        key (dict): plain data the states depend on (the encoder's fingerprint, its cache point,
            the front end); hashed, with each split's utterances and views, into its file names.
    """

    def __init__(self, folder: str | Path, key: dict):
        self.folder = Path(folder)
        self.key = {**key, "format": _FORMAT_VERSION}

    def _paths(self, split: str, key: dict) -> tuple[Path, Path]:
        tag = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        return self.folder / f"{split}-{tag}.f16", self.folder / f"{split}-{tag}.json"

    def _split_key(self, dataset: SpeechDataset, views: int, augment: AugmentConfig | None, seed: int) -> dict:
        utterances = hashlib.sha1("\n".join(f"{u.utt_id}\t{u.audio_path}" for u in dataset.utterances).encode()).hexdigest()
        conditions = asdict(augment) if views > 1 and augment is not None else None
        key = {**self.key, "utterances": utterances, "count": len(dataset), "views": views, "augment": conditions,
               "seed": seed if views > 1 else None}
        return json.loads(json.dumps(key))  # as the metadata file gives it back (tuples as lists)

    def load(self, split: str, dataset: SpeechDataset, views: int = 1, augment: AugmentConfig | None = None,
             seed: int = 0) -> CachedStates | None:
        """The split's cached states, or ``None`` when there is no finished, matching file."""
        key = self._split_key(dataset, views, augment, seed)
        states_path, meta_path = self._paths(split, key)
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("key") != key:
                return None
            states = np.memmap(states_path, dtype=np.float16, mode="r", shape=tuple(meta["shape"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        starts, lengths = np.array(meta["starts"], dtype=np.int64), np.array(meta["lengths"], dtype=np.int64)
        if starts.shape != (views, len(dataset)) or lengths.shape != starts.shape or int((starts + lengths).max(initial=0)) > states.shape[0]:
            return None
        return CachedStates(states, starts, lengths, {int(i): reason for i, reason in meta.get("unreadable", {}).items()})

    @torch.no_grad()
    def write(
        self, split: str, dataset: SpeechDataset, encode: Encode, views: int = 1, augment: AugmentConfig | None = None,
        seed: int = 0, batch_seconds: float = 60.0, progress: bool = False, num_workers: int = 1,
    ) -> None:
        """Compute and store the states of ``dataset`` (see the module docstring).

        Args:
            split (str): the split's name, for the file names.
            dataset (SpeechDataset): the split's utterances, in order.
            encode (callable): waveforms `(B, N)` and lengths `(B,)` -> states `(B, L, d)` and lengths `(B,)`.
            views (int, optional): copies of each utterance; views past the first under ``augment``. (Default: ``1``)
            augment (AugmentConfig or None, optional): the training conditions of views 1 onward. (Default: ``None``)
            seed (int, optional): seed of their draws. (Default: ``0``)
            batch_seconds (float, optional): audio encoded at a time. (Default: ``60.0``)
            progress (bool, optional): a progress bar on standard error. (Default: ``False``)
            num_workers (int, optional): loader processes that read the audio and draw the conditions. (Default: ``1``)

        Raises:
            ValueError: views past the first without ``augment``, no utterance readable, or a
                non-finite state (the message names the utterance).
        """
        if views < 1 or (views > 1 and augment is None):
            raise ValueError(f"a cache of {views} views needs views >= 1, and data.augment for views past the first")
        key = self._split_key(dataset, views, augment, seed)
        states_path, meta_path = self._paths(split, key)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path.unlink(missing_ok=True)  # from here on the old file, if any, is not finished
        partial = states_path.with_name(states_path.name + ".partial")
        starts = np.zeros((views, len(dataset)), dtype=np.int64)
        lengths = np.zeros_like(starts)
        unreadable: dict[int, str] = {}
        order = sorted(range(len(dataset)), key=lambda i: dataset.durations[i])  # similar lengths together: little padding
        batches = _ViewBatches(dataset, _batches(order, dataset.durations, batch_seconds), views, augment, seed)
        # Loader processes read and draw the conditions of the next batches while this one encodes.
        loader = DataLoader(batches, batch_size=None, num_workers=num_workers, collate_fn=_as_is, generator=torch.Generator())
        bar = _bar(progress, views * len(dataset), split)
        written, width = 0, None
        with partial.open("wb") as out:
            for view, indices, waveforms, samples, bad in loader:
                unreadable.update(bad)
                if indices:
                    states, counts = encode(waveforms, samples)
                    states = states.float().cpu().numpy()
                    for row, (i, count) in enumerate(zip(indices, counts.tolist())):
                        block = states[row, :count]
                        if not np.isfinite(block).all() or np.abs(block).max(initial=0) > _FLOAT16_MAX:
                            raise ValueError(f"{dataset.utterances[i].audio_path}: the encoder gave non-finite states "
                                             "(or past float16's range); check model.pretrained_encoder")
                        out.write(block.astype(np.float16).tobytes())
                        starts[view, i], lengths[view, i] = written, count
                        written, width = written + count, block.shape[1]
                if bar is not None:
                    bar.update(len(indices) + len(bad))
        if bar is not None:
            bar.close()
        if width is None:
            partial.unlink(missing_ok=True)
            raise ValueError(f"none of the {len(dataset)} {split} utterances could be read (the first: {dataset.utterances[0].audio_path})")
        partial.replace(states_path)
        meta = {"key": key, "shape": [written, width], "starts": starts.tolist(), "lengths": lengths.tolist(),
                "unreadable": {str(i): reason for i, reason in unreadable.items()}}
        meta_path.write_text(json.dumps(meta) + "\n")  # written last: it marks a finished cache


def _batches(order: list[int], durations: list[float], seconds: float) -> list[list[int]]:
    """``order`` cut into runs of at most ``seconds`` of padded audio (one utterance at least)."""
    batches, current = [], []
    for i in order:
        if current and durations[i] * (len(current) + 1) > seconds:  # sorted: the newest is the longest
            batches.append(current)
            current = []
        current.append(i)
    return batches + ([current] if current else [])


class _ViewBatches(Dataset):
    """Item ``k``: view ``k // len(batches)`` of batch ``k % len(batches)``, as ``(view, indices, waveforms,
    samples, unreadable)``; each batch's conditions come from its own seeded generator, so a cache
    is the same whichever process draws them."""

    def __init__(self, dataset: SpeechDataset, batches: list[list[int]], views: int, augment: AugmentConfig | None, seed: int):
        self.dataset, self.batches, self.views, self.augment, self.seed = dataset, batches, views, augment, seed

    def __len__(self) -> int:
        return self.views * len(self.batches)

    def __getitem__(self, item: int):
        view, number = divmod(item, len(self.batches))
        waves, indices, unreadable = [], [], {}
        for i in self.batches[number]:
            try:
                wave = self.dataset.waveform(i)
            except AudioError as err:
                unreadable[i] = str(err).removeprefix(f"{self.dataset.utterances[i].audio_path}: ")
                continue
            if len(wave) < self.dataset.min_samples:
                unreadable[i] = f"{len(wave)} samples, shorter than one listener frame ({self.dataset.min_samples} samples)"
                continue
            waves.append(wave)
            indices.append(i)
        if not waves:
            return view, [], None, None, unreadable
        waveforms, samples = pad_waves(waves)
        if view > 0:
            generator = torch.Generator().manual_seed((self.seed * 1009 + view) * 1_000_003 + number)
            waveforms, samples = augment_batch(waveforms, samples, self.augment, self.dataset.sample_rate, generator)
        return view, indices, waveforms, samples, unreadable


def _as_is(item):
    return item


def _bar(progress: bool, total: int, split: str):
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="utt", desc=f"encoder states ({split})", leave=False)


class CachedSpeechDataset(Dataset):
    """A split's utterances served as cached states: ``(states (L, d), text, key)`` items, which
    :class:`speech_attend.data.dataset.Collate` pads into a batch's ``encoded`` states.

    Args:
        dataset (SpeechDataset): the split (texts, keys, durations for bucketing).
        cached (CachedStates): its states.
        random_view (bool, optional): serve a view drawn afresh for each item (training); else view 0.
            (Default: ``False``)
    """

    def __init__(self, dataset: SpeechDataset, cached: CachedStates, random_view: bool = False):
        self.dataset, self.cached, self.random_view = dataset, cached, random_view
        self.unreadable = {**dataset.unreadable, **cached.unreadable}

    def __len__(self) -> int:
        return len(self.dataset)

    def frames(self) -> list[int]:
        return self.dataset.frames()

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str, str] | BadSample:
        utterance = self.dataset.utterances[index]
        if index in self.unreadable:
            return BadSample(str(utterance.audio_path), self.unreadable[index])
        view = int(torch.randint(self.cached.views, ())) if self.random_view else 0
        return self.cached.get(view, index), self.dataset.texts[index], utterance.utt_id
