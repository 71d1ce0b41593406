"""Data for the recognizer: utterances -> waveforms + normalised text -> padded batches.

:class:`SpeechDataset` reads the utterances a corpus reader (:mod:`speech_attend.data.readers`)
lists, at the model's sample rate, with transcripts normalised by
:func:`speech_attend.data.text.normalize_text`; a :class:`Collate` pads them into a :class:`Batch`
and, given the vocabulary, turns the transcripts into the speller's ids (as the captioner's
collate does with captions), so the LightningModule only computes the loss. Features are
computed by the model's front end (:mod:`speech_attend.model.features`), so the data side never
needs to know the feature settings. The LightningDataModule that serves the splits
is :mod:`speech_attend.train.datamodule`. No Lightning here: ``transcribe`` imports this module.
"""

from __future__ import annotations

import copy
import os
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, Sequence

import torch
from torch.utils.data import Dataset

from shared import Vocabulary
from shared.io.bad_samples import BadSample, drop_bad_samples

from speech_attend.data.audio import AudioError, audio_duration, load_audio
from speech_attend.data.readers import Utterance
from speech_attend.data.text import normalize_text

__all__ = ["Batch", "SpeechDataset", "Collate", "collate", "speller_targets", "pad_waves", "build_vocabulary", "FRAMES_PER_SECOND"]

FRAMES_PER_SECOND = 100  # unit of ``max_frames``: 10 ms frames


class Batch(NamedTuple):
    """A padded batch.

    Attributes:
        waveforms (torch.Tensor): `(B, N)`, zero-padded.
        lengths (torch.Tensor): samples per waveform `(B,)`.
        texts (list[str]): normalised transcripts.
        keys (list[str]): utterance ids.
        skipped (list[BadSample]): items left out because their audio could not be read.
        inputs (torch.Tensor or None): speller inputs ``<sos> y`` `(B, U + 1)`, padded; ``None``
            from a collate without a vocabulary (:func:`speller_targets` for all three).
        outputs (torch.Tensor or None): speller outputs ``y <eos>`` `(B, U + 1)`, padded.
        label_lengths (torch.Tensor or None): characters per transcript, ``<eos>`` not counted `(B,)`.
        references (torch.Tensor or None): the training audio without its noise, gain, offset and
            rounding `(B, N)`, the same lengths (:func:`~speech_attend.data.augment.augment_batch`);
            ``None`` unless the consistency loss asks for it.
        encoded (torch.Tensor or None): the pretrained listener's cached frozen states `(B, L, d)`,
            zero-padded, served instead of audio (:mod:`speech_attend.data.encoder_cache`); then
            ``waveforms`` is empty `(B, 0)`. (Default: ``None``)
        encoded_lengths (torch.Tensor or None): states per utterance `(B,)`.
    """

    waveforms: torch.Tensor
    lengths: torch.Tensor
    texts: list[str]
    keys: list[str]
    skipped: list[BadSample] = []
    inputs: torch.Tensor | None = None
    outputs: torch.Tensor | None = None
    label_lengths: torch.Tensor | None = None
    references: torch.Tensor | None = None
    encoded: torch.Tensor | None = None
    encoded_lengths: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        """Utterances in the batch (the readable ones)."""
        return len(self.keys)

    @property
    def cached(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(encoded, encoded_lengths)`` for a batch of cached states, else ``None``."""
        return None if self.encoded is None else (self.encoded, self.encoded_lengths)


class SpeechDataset(Dataset):
    """Utterances with normalised text, read at ``sample_rate``.

    Args:
        utterances (list[Utterance]): from a corpus reader.
        sample_rate (int): rate of the returned waveforms.
        lowercase (bool, optional): text normalisation. (Default: ``True``)
        keep_punctuation (str, optional): text normalisation. (Default: ``"'"``)
        cache (bool, optional): decode every file now and keep it in memory (float16).
            (Default: ``False``)

    A file that cannot be read (:func:`~speech_attend.data.audio.load_audio` also refuses NaN, infinite
    and absurdly large samples), or holds fewer than ``min_samples`` samples (too short for the
    model to make one listener frame), comes back as a :class:`~shared.io.bad_samples.BadSample` (an
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
        self.min_samples = 1  # raised to one listener frame of the model (SpeechDataModule.set_min_samples)
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


def speller_targets(texts: Sequence[str], vocabulary: Vocabulary) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The speller's teacher-forced ids of character transcripts.

    Args:
        texts (sequence of str): normalised transcripts; ``""`` (a sound without speech) is just ``<eos>``.
        vocabulary (Vocabulary): characters -> ids; unknown characters become ``<unk>``.

    Returns:
        tuple: inputs ``<sos> y`` and outputs ``y <eos>``, both `(B, max U + 1)` padded with
        ``<pad>``, and the label lengths `(B,)` (``<eos>`` not counted).
    """
    ids = [torch.tensor(vocabulary.encode(list(text)), dtype=torch.long) for text in texts]
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
    pad, sos, eos = vocabulary.pad_id, vocabulary.sos_id, vocabulary.eos_id
    inputs = torch.full((len(ids), int(lengths.max()) + 1), pad, dtype=torch.long)  # (B, U + 1)
    outputs = torch.full_like(inputs, pad)
    for i, x in enumerate(ids):
        inputs[i, 0], inputs[i, 1 : len(x) + 1] = sos, x
        outputs[i, : len(x)], outputs[i, len(x)] = x, eos
    return inputs, outputs, lengths


class Collate:
    """Items -> a padded :class:`Batch`, unreadable items left out (listed in ``skipped``); a batch
    of only unreadable items has no utterances at all. Items of cached encoder states `(L, d)`
    (:class:`speech_attend.data.encoder_cache.CachedSpeechDataset`) are padded into ``encoded``.

    Args:
        vocabulary (Vocabulary or None, optional): with one, the batch also holds the speller's
            ids of its transcripts (``inputs``, ``outputs``, ``label_lengths``); without, only
            the texts (feature statistics, benchmarks). (Default: ``None``)
    """

    def __init__(self, vocabulary: Vocabulary | None = None):
        self.vocabulary = vocabulary

    def __call__(self, items: list[tuple[torch.Tensor, str, str] | BadSample]) -> Batch:
        items, skipped = drop_bad_samples(items)
        if not items:
            return Batch(torch.zeros(0, 1), torch.zeros(0, dtype=torch.long), [], [], skipped)
        waves, texts, keys = zip(*items)
        if waves[0].dim() == 2:  # cached states, not audio
            encoded, encoded_lengths = pad_waves(waves)
            empty = torch.zeros(len(waves), 0)
            batch = Batch(empty, torch.zeros(len(waves), dtype=torch.long), [], list(keys), skipped,
                          encoded=encoded, encoded_lengths=encoded_lengths)
            return self.with_texts(batch, list(texts))
        padded, lengths = pad_waves(waves)
        return self.with_texts(Batch(padded, lengths, [], list(keys), skipped), list(texts))

    def with_texts(self, batch: Batch, texts: list[str]) -> Batch:
        """``batch`` with new transcripts and the ids that follow them (training conditions
        replace some utterances by sounds without speech, whose transcript is ``""``)."""
        if self.vocabulary is None:
            return batch._replace(texts=texts)
        inputs, outputs, label_lengths = speller_targets(texts, self.vocabulary)
        return batch._replace(texts=texts, inputs=inputs, outputs=outputs, label_lengths=label_lengths)


collate = Collate()  # waveforms and texts, no ids


def pad_waves(waves: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Waveforms `(N_i,)` (or states `(N_i, d)`) as one zero-padded batch `(B, max N_i, ...)` and their lengths `(B,)`."""
    lengths = torch.tensor([len(w) for w in waves], dtype=torch.long)
    return torch.nn.utils.rnn.pad_sequence(list(waves), batch_first=True), lengths


def build_vocabulary(texts: list[str]) -> Vocabulary:
    """Character vocabulary of the training text (a space is a character)."""
    return Vocabulary.build(list(text) for text in texts)
