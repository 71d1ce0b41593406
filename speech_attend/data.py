"""Data for the recognizer: utterances -> waveforms + normalised text -> bucketed batches.

The LightningDataModule reads any corpus :func:`speech_attend.corpora.read_corpus` knows
(LibriSpeech layout, Common Voice, a manifest) from ``data_dir``, normalises the transcripts
(:func:`speech_attend.text.normalize_text`), builds the character vocabulary from the training
text, applies the out-of-vocabulary policy (``oov_policy``) to the validation and test
transcripts, and serves length-bucketed batches of padded waveforms. Features are computed by the
model's front end (:mod:`speech_attend.features`), so the data side never needs to know the
feature settings. ``cache_audio`` keeps every waveform in memory (the built-in corpus fits
easily), so each file is decoded once per run instead of once per epoch.
"""

from __future__ import annotations

import copy
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn
from torch.utils.data import DataLoader, Dataset

from shared import Vocabulary
from shared.robust import BadSample, drop_bad_samples

from .audio import AudioError, audio_duration, load_audio
from .augment import AugmentConfig, AugmentedCollate
from .corpora import Utterance, read_corpus
from .sampler import BucketBatchSampler
from .text import OOV_POLICIES, map_out_of_vocabulary, normalize_text, unknown_characters

__all__ = ["Batch", "SpeechDataset", "collate", "build_vocabulary", "SpeechDataModule", "FRAMES_PER_SECOND"]

FRAMES_PER_SECOND = 100  # unit of ``max_frames``: 10 ms frames


class Batch(NamedTuple):
    """A padded batch.

    Attributes:
        waveforms (torch.Tensor): `(B, N)`, zero-padded.
        lengths (torch.Tensor): samples per waveform `(B,)`.
        texts (list[str]): normalised transcripts.
        keys (list[str]): utterance ids.
        skipped (list[BadSample]): items left out because their audio could not be read.
    """

    waveforms: torch.Tensor
    lengths: torch.Tensor
    texts: list[str]
    keys: list[str]
    skipped: list[BadSample] = []

    @property
    def batch_size(self) -> int:
        """Utterances in the batch (the readable ones)."""
        return len(self.keys)


class SpeechDataset(Dataset):
    """Utterances with normalised text, read at ``sample_rate``.

    Args:
        utterances (list[Utterance]): from a corpus reader.
        sample_rate (int): rate of the returned waveforms.
        lowercase (bool, optional): text normalisation. (Default: ``True``)
        keep_punctuation (str, optional): text normalisation. (Default: ``"'"``)
        cache (bool, optional): decode every file now and keep it in memory (float16).
            (Default: ``False``)

    A file that cannot be read, or holds fewer than ``min_samples`` samples (too short for the
    model to make one listener frame), comes back as a :class:`~shared.robust.BadSample` (an
    unreadable file is given a nominal duration of one second for bucketing), which
    :func:`collate` drops and the training loop logs: one bad file does not end an epoch or a test.
    """

    def __init__(
        self, utterances: list[Utterance], sample_rate: int, lowercase: bool = True, keep_punctuation: str = "'", cache: bool = False
    ):
        self.utterances = utterances
        self.sample_rate = sample_rate
        self.texts = [normalize_text(u.text, lowercase=lowercase, keep_punctuation=keep_punctuation) for u in utterances]
        self.unreadable: dict[int, str] = {}  # index -> why its audio cannot be read
        self.min_samples = 1  # the model raises it to one listener frame (SpeechRecognizer.setup)
        self.durations = [self._duration(i, u) for i, u in enumerate(utterances)]
        self.cache: list[torch.Tensor | None] | None = None
        if cache:
            with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:  # libsndfile releases the GIL
                self.cache = list(pool.map(self._read_for_cache, range(len(utterances))))
            self.durations = [d if w is None else len(w) / sample_rate for d, w in zip(self.durations, self.cache)]

    def _duration(self, index: int, utterance: Utterance) -> float:
        if utterance.duration is not None:
            return utterance.duration
        try:
            return audio_duration(utterance.audio_path)
        except AudioError as err:
            self.unreadable[index] = _reason(err, utterance.audio_path)
            return 1.0

    def _read_for_cache(self, index: int) -> torch.Tensor | None:
        if index in self.unreadable:
            return None
        try:
            return load_audio(self.utterances[index].audio_path, self.sample_rate).half()
        except AudioError as err:
            self.unreadable[index] = _reason(err, self.utterances[index].audio_path)
            return None

    def __len__(self) -> int:
        return len(self.utterances)

    def subset(self, indices: list[int]) -> "SpeechDataset":
        """The same dataset restricted to ``indices``, without reading any audio again."""
        subset = copy.copy(self)
        subset.utterances = [self.utterances[i] for i in indices]
        subset.texts = [self.texts[i] for i in indices]
        subset.durations = [self.durations[i] for i in indices]
        subset.unreadable = {new: self.unreadable[old] for new, old in enumerate(indices) if old in self.unreadable}
        subset.cache = None if self.cache is None else [self.cache[i] for i in indices]
        return subset

    def frames(self) -> list[int]:
        """Length of each item in 10 ms frames (for bucketing)."""
        return [max(1, int(d * FRAMES_PER_SECOND)) for d in self.durations]

    def waveform(self, index: int) -> torch.Tensor:
        """The waveform `(T,)` of item ``index``; raises :class:`AudioError` for an unreadable file."""
        path = self.utterances[index].audio_path
        if index in self.unreadable:
            raise AudioError(f"{path}: {self.unreadable[index]}")
        if self.cache is not None:
            return self.cache[index].float()
        return load_audio(path, self.sample_rate)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, str, str] | BadSample:
        path = self.utterances[index].audio_path
        if index in self.unreadable:  # found unreadable at set-up
            return BadSample(str(path), self.unreadable[index])
        try:
            wave = self.waveform(index)
        except AudioError as err:
            return BadSample(str(path), _reason(err, path))
        if len(wave) < self.min_samples:
            return BadSample(str(path), f"{len(wave)} samples, shorter than one listener frame ({self.min_samples} samples)")
        return wave, self.texts[index], self.utterances[index].utt_id


def _reason(err: AudioError, path) -> str:
    return str(err).removeprefix(f"{path}: ")


def collate(items: list[tuple[torch.Tensor, str, str] | BadSample]) -> Batch:
    """Pad waveforms to the longest and keep the lengths beside them; unreadable items are left out
    (listed in ``skipped``), and a batch of only unreadable items has no utterances at all."""
    items, skipped = drop_bad_samples(items)
    if not items:
        return Batch(torch.zeros(0, 1), torch.zeros(0, dtype=torch.long), [], [], skipped)
    waves, texts, keys = zip(*items)
    padded, lengths = pad_waves(waves)
    return Batch(padded, lengths, list(texts), list(keys), skipped)


def pad_waves(waves: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Waveforms `(N_i,)` as one zero-padded batch `(B, max N_i)` and their lengths `(B,)`."""
    lengths = torch.tensor([len(w) for w in waves], dtype=torch.long)
    return torch.nn.utils.rnn.pad_sequence(list(waves), batch_first=True), lengths


def _listed(characters: list[str]) -> str:
    return ", ".join(repr(c) for c in characters)


def build_vocabulary(texts: list[str]) -> Vocabulary:
    """Character vocabulary of the training text (a space is a character)."""
    return Vocabulary.build(list(text) for text in texts)


class SpeechDataModule(pl.LightningDataModule):
    """Splits, vocabulary and bucketed loaders for a speech corpus.

    Args:
        data_dir (str): the corpus folder (LibriSpeech layout, Common Voice, or manifests).
        train_split (str, optional): (Default: ``"train"``)
        val_split (str, optional): (Default: ``"dev"``)
        test_split (str, optional): (Default: ``"test"``)
        sample_rate (int, optional): rate the audio is resampled to; must match the model's
            features. (Default: ``16000``)
        batch_size (int, optional): most utterances per batch. (Default: ``32``)
        max_frames (int or None, optional): most padded 10 ms frames per batch (batch size x
            longest utterance), which keeps memory flat across lengths. (Default: ``None``)
        eval_batch_size (int, optional): utterances per validation/test batch. (Default: ``64``)
        num_workers (int, optional): loader processes (0 with ``cache_audio``). (Default: ``0``)
        cache_audio (bool, optional): keep all waveforms in memory. (Default: ``False``)
        lowercase (bool, optional): transcripts lower-cased. (Default: ``True``)
        keep_punctuation (str, optional): punctuation kept in transcripts. (Default: ``"'"``)
        min_duration (float, optional): shorter training utterances are left out, seconds. (Default: ``0.1``)
        max_duration (float or None, optional): longer training utterances are left out. (Default: ``None``)
        max_train_utterances (int or None, optional): use only the first N training utterances. (Default: ``None``)
        max_val_utterances (int or None, optional): validate on the first N only (faster
            epochs; test always uses the whole split). (Default: ``None``)
        curriculum_epochs (int, optional): first epochs ordered shortest batches first
            (see :class:`BucketBatchSampler`). (Default: ``0``)
        seed (int, optional): seed of the batch order. (Default: ``0``)
        oov_policy (str, optional): what to do with validation and test transcripts that hold
            characters outside the vocabulary (the characters of the training text; when only
            validating or testing a checkpoint, the model's): ``"drop"`` removes those
            characters (:func:`~speech_attend.text.map_out_of_vocabulary`) and warns once per
            split with the number of transcripts changed and the characters; ``"error"`` stops
            ``setup`` with an error naming the utterance and the characters. (Default: ``"drop"``)
        augment (AugmentConfig or None, optional): acoustic conditions drawn for every training
            batch (:mod:`speech_attend.augment`); validation and test data are never augmented.
            (Default: ``None``)
    """

    def __init__(
        self,
        data_dir: str,
        train_split: str = "train",
        val_split: str = "dev",
        test_split: str = "test",
        sample_rate: int = 16000,
        batch_size: int = 32,
        max_frames: int | None = None,
        eval_batch_size: int = 64,
        num_workers: int = 0,
        cache_audio: bool = False,
        lowercase: bool = True,
        keep_punctuation: str = "'",
        min_duration: float = 0.1,
        max_duration: float | None = None,
        max_train_utterances: int | None = None,
        max_val_utterances: int | None = None,
        curriculum_epochs: int = 0,
        seed: int = 0,
        oov_policy: str = "drop",
        augment: AugmentConfig | None = None,
    ):
        super().__init__()
        if oov_policy not in OOV_POLICIES:
            raise ValueError(f"oov_policy must be one of {', '.join(OOV_POLICIES)}, got {oov_policy!r}")
        if augment is not None and augment.sample_rate != sample_rate:
            raise ValueError(f"augment.sample_rate must equal the data's sample_rate {sample_rate}, got {augment.sample_rate}")
        self.save_hyperparameters(ignore=["augment"])
        self.hparams.update(augment=None if augment is None else asdict(augment))  # plain data in checkpoints
        self.augment = augment
        self.data_dir = Path(data_dir)
        self.datasets: dict[str, SpeechDataset] = {}
        self.vocabulary: Vocabulary | None = None

    def _dataset(self, split: str, limit: int | None = None, training: bool = False) -> SpeechDataset:
        hp = self.hparams
        utterances = read_corpus(self.data_dir, split)[:limit]
        dataset = SpeechDataset(utterances, hp.sample_rate, hp.lowercase, hp.keep_punctuation, hp.cache_audio)
        if training:  # drop what the model cannot or should not learn from
            keep = [
                i for i, (d, t) in enumerate(zip(dataset.durations, dataset.texts))
                if t and d >= hp.min_duration and (hp.max_duration is None or d <= hp.max_duration)
            ]
            if not keep:
                raise ValueError(f"{self.data_dir}: no training utterance between {hp.min_duration} and {hp.max_duration} s with text")
            dataset = dataset.subset(keep)
        return dataset

    def setup(self, stage: str | None = None) -> None:
        hp = self.hparams
        if stage in ("fit", None) and "train" not in self.datasets:
            self.datasets["train"] = self._dataset(hp.train_split, hp.max_train_utterances, training=True)
            self.vocabulary = build_vocabulary(self.datasets["train"].texts)
        if stage in ("fit", "validate", None) and "val" not in self.datasets:
            self.datasets["val"] = self._apply_oov_policy(self._dataset(hp.val_split, hp.max_val_utterances), hp.val_split)
        if stage in ("test", None) and "test" not in self.datasets:
            self.datasets["test"] = self._apply_oov_policy(self._dataset(hp.test_split), hp.test_split)

    def _charset(self) -> set[str] | None:
        """Characters the model can spell: the training text's, else those of the model being
        validated or tested (a checkpoint's vocabulary); ``None`` when neither is known yet."""
        vocabulary = self.vocabulary
        if vocabulary is None and self.trainer is not None:
            vocabulary = getattr(self.trainer.lightning_module, "vocabulary", None)
        return None if vocabulary is None else set(vocabulary.to_dict()["tokens"])

    def _apply_oov_policy(self, dataset: SpeechDataset, split: str) -> SpeechDataset:
        """Drop (with one warning) or refuse the characters of ``dataset``'s transcripts that the
        model cannot spell, as ``oov_policy`` says; ``dataset.texts`` is changed in place."""
        charset = self._charset()
        if charset is None:
            return dataset
        changed, unknown = 0, set()
        for index, text in enumerate(dataset.texts):
            missing = unknown_characters(text, charset)
            if not missing:
                continue
            if self.hparams.oov_policy == "error":
                utterance = dataset.utterances[index]
                raise ValueError(
                    f"{utterance.audio_path}: the {split} transcript of {utterance.utt_id} has characters outside the "
                    f"vocabulary of the training text: {_listed(missing)}; expected only those characters "
                    f"(or set data.oov_policy: drop)"
                )
            dataset.texts[index] = map_out_of_vocabulary(text, charset, policy="drop")
            changed += 1
            unknown.update(missing)
        if changed:
            rank_zero_warn(
                f"{changed} of {len(dataset)} {split} transcripts have characters outside the vocabulary of the "
                f"training text ({_listed(sorted(unknown))}); those characters were dropped (data.oov_policy: drop)"
            )
        return dataset

    def statistics_batches(self, max_utterances: int = 2000, batch_size: int = 32) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(waveforms, lengths)`` of up to ``max_utterances`` training utterances, for feature statistics."""
        dataset = self.datasets["train"]
        step = max(1, len(dataset) // max_utterances)  # an even spread over the corpus, the same on every rank
        indices = list(range(0, len(dataset), step))[:max_utterances]
        for start in range(0, len(indices), batch_size):
            batch = collate([dataset[i] for i in indices[start : start + batch_size]])
            if batch.batch_size:  # unreadable files are left out here too
                yield batch.waveforms, batch.lengths

    def _rank(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)

    def _loader(self, name: str, batch_size: int, max_frames: int | None, shuffle: bool, curriculum_epochs: int = 0) -> DataLoader:
        if name not in self.datasets:
            raise ValueError(f"the {name} split is not set up (call setup first)")
        dataset = self.datasets[name]
        world, rank = self._rank()
        sampler = BucketBatchSampler(
            dataset.frames(), batch_size, max_frames, shuffle=shuffle, seed=self.hparams.seed, num_replicas=world, rank=rank,
            curriculum_epochs=curriculum_epochs,
        )
        workers = self.hparams.num_workers
        augmented = name == "train" and self.augment is not None
        return DataLoader(
            dataset, batch_sampler=sampler, collate_fn=AugmentedCollate(collate, self.augment) if augmented else collate, num_workers=workers,
            persistent_workers=workers > 0, pin_memory=torch.cuda.is_available(),
        )

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        return self._loader("train", hp.batch_size, hp.max_frames, shuffle=True, curriculum_epochs=hp.curriculum_epochs)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.hparams.eval_batch_size, None, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.hparams.eval_batch_size, None, shuffle=False)
