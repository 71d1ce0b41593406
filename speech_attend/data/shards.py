"""The recognizer's shards: one utterance an item, written from any corpus the readers know, read
back through the same audio reader as the files.

An item holds ``index`` (its place in the split), ``key`` (the utterance id), ``audio`` (the file's
bytes as they were on disk: WAV, FLAC, OGG or MP3), ``text`` (the transcript as the corpus wrote
it), ``duration`` (seconds, from the corpus or the file's header; 1 for a file whose header cannot
be read, as :class:`~speech_attend.data.dataset.SpeechDataset` does) and ``source`` (the file it came
from, named when the audio cannot be decoded). The training split is written in a seeded random
order, so any stretch of it (the first items, for the feature statistics) is a sample of the
whole; the other splits keep the corpus's order.

The marker (:mod:`shared.io.shards.layout`) adds the transcript normalisation the shards were written
with (a run that asks for another is refused), the character counts of the normalised training
text (the vocabulary), and per split its hours, its longest utterance, each utterance's duration
(for the evaluation batches) and its characters (for the out-of-vocabulary policy).

Training batches are duration buckets: each window of utterances (``data.shard_window``) is sorted
by length and cut into batches of at most ``batch_size`` utterances and ``max_frames`` padded
frames, in a random order (:func:`duration_buckets`); :class:`shared.io.shards.stream.ShardStream` makes
their number equal on every rank.
"""

from __future__ import annotations

import itertools
import os
import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from shared import Vocabulary
from shared.io.shards.layout import UNREADABLE, ShardError, Shards, check_vocabulary, open_shards
from shared.io.shards.writer import DEFAULT_CHUNK_MB, file_state, fingerprint, up_to_date, write_shards
from shared.io.bad_samples import BadSample
from speech_attend.data.audio import AudioError, audio_duration, load_audio_bytes
from speech_attend.data.dataset import FRAMES_PER_SECOND, collate
from speech_attend.data.readers import CorpusError, Utterance, read_corpus
from speech_attend.data.sampler import BucketBatchSampler
from speech_attend.data.text import map_out_of_vocabulary, normalize_text

__all__ = ["APP", "SPLITS", "write_speech_shards", "decode_utterance", "duration_buckets", "SpeechShards"]

APP = "speech-attend"
SPLITS = ("train", "dev", "test")  # what `prepare shards` writes when no --split is given, those the corpus has


# ----------------------------------------------------------------------------- writing


def _pack(example: tuple) -> dict:
    """``(index, key, file, transcript, duration)`` -> the stored item (runs in the writing processes)."""
    index, key, path, text, duration = example
    return {"index": index, "key": key, "audio": Path(path).read_bytes(), "text": text, "duration": float(duration),
            "source": str(path)}


def _read_splits(data_dir: str | os.PathLike, splits: Sequence[str] | None) -> dict[str, list[Utterance]]:
    if splits:
        return {name: read_corpus(data_dir, name) for name in splits}
    found = {}
    for name in SPLITS:
        try:
            found[name] = read_corpus(data_dir, name)
        except CorpusError as err:
            if name == "train" or "no corpus for split" not in str(err):
                raise
    return found


def _durations(utterances: list[Utterance], progress: bool) -> list[float]:
    """Each utterance's seconds: the corpus's, else its file header's (1 for an unreadable header, as
    the file reader gives it for bucketing)."""

    def duration(utterance: Utterance) -> float:
        if utterance.duration is not None:
            return float(utterance.duration)
        try:
            return audio_duration(utterance.audio_path)
        except AudioError:
            return 1.0

    from tqdm import tqdm

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:  # header reads wait on the disk
        found = pool.map(duration, utterances)
        return list(tqdm(found, total=len(utterances), desc="durations", unit="utt", leave=False, disable=not progress))


def write_speech_shards(
    data_dir: str | os.PathLike,
    out: str,
    splits: Sequence[str] | None = None,
    lowercase: bool = True,
    keep_punctuation: str = "'",
    seed: int = 0,
    chunk_mb: float = DEFAULT_CHUNK_MB,
    workers: int = 1,
    progress: bool = True,
    overwrite: bool = False,
) -> tuple[bool, dict[str, int]]:
    """Write the corpus in ``data_dir`` (any layout :func:`~speech_attend.data.readers.read_corpus`
    reads) as shards in ``out`` (a folder or an object-store URL).

    Args:
        data_dir (str or PathLike): the corpus folder.
        out (str): where the shards go.
        splits (sequence of str or None, optional): the splits to write; ``None``: those of
            ``train``, ``dev`` and ``test`` the corpus has (``train`` at least). (Default: ``None``)
        lowercase (bool, optional): transcript normalisation the vocabulary is counted with; training
            must use the same. (Default: ``True``)
        keep_punctuation (str, optional): likewise. (Default: ``"'"``)
        seed (int, optional): seed of the training split's order. (Default: ``0``)
        chunk_mb (float, optional): chunk size in megabytes. (Default: ``64``)
        workers (int, optional): writing processes. (Default: ``1``)
        progress (bool, optional): progress bars on standard error. (Default: ``True``)
        overwrite (bool, optional): replace shards written from other inputs. (Default: ``False``)

    Returns:
        tuple: whether anything was written (``False``: ``out`` already held these shards), and the
        utterances of each split.

    Raises:
        CorpusError: the corpus cannot be read. ShardError: ``out`` holds something else.
        WriteError: a chunk or the marker could not be written; a local ``out`` is left as it was.
    """
    corpus = _read_splits(data_dir, splits)
    if "train" in corpus:  # a seeded order, so any stretch of the training split is a sample of it
        corpus["train"] = list(corpus["train"])
        random.Random(seed).shuffle(corpus["train"])
    counts = {name: len(utterances) for name, utterances in corpus.items()}
    settings = {"lowercase": lowercase, "keep_punctuation": keep_punctuation, "seed": seed, "chunk_mb": chunk_mb}
    key = fingerprint(
        itertools.chain(
            [{"app": APP, "settings": settings, "splits": list(corpus)}],
            ([name, u.utt_id, file_state(u.audio_path), u.text, u.duration] for name, us in corpus.items() for u in us),
        )
    )
    if up_to_date(out, APP, key):
        return False, counts
    marker: dict = {"settings": settings, "splits": {}}
    examples = {}
    vocabulary: Counter = Counter()
    for name, utterances in corpus.items():
        durations = _durations(utterances, progress)
        texts = [normalize_text(u.text, lowercase=lowercase, keep_punctuation=keep_punctuation) for u in utterances]
        characters = Counter(c for text in texts for c in text)
        if name == "train":
            vocabulary = characters
        marker["splits"][name] = {
            "seconds": round(sum(durations), 3),
            "longest": max(durations),
            "lengths": [round(d, 3) for d in durations],  # for the evaluation batches, in item order
            "characters": sorted(characters),
        }
        examples[name] = [(i, u.utt_id, u.audio_path, u.text, d) for i, (u, d) in enumerate(zip(utterances, durations))]
    marker["vocabulary"] = {"kind": "characters", "counts": dict(sorted(vocabulary.items()))}
    written = write_shards(out, APP, examples, _pack, marker, key, chunk_mb, workers, progress, overwrite)
    return written, counts


# ----------------------------------------------------------------------------- reading


def decode_utterance(
    item: dict,
    epoch: int,
    sample_rate: int,
    min_samples: int = 1,
    lowercase: bool = True,
    keep_punctuation: str = "'",
    charset: frozenset[str] | None = None,
    durations: tuple[float, float | None] | None = None,
) -> tuple[torch.Tensor, str, str] | BadSample | None:
    """A stored utterance as :class:`~speech_attend.data.dataset.SpeechDataset` gives one:
    ``(waveform (T,), normalised transcript, key)``, a :class:`BadSample` when its audio cannot be
    decoded or is shorter than ``min_samples``, or ``None`` for a training utterance left out.

    Args:
        item (dict): as stored (module docstring).
        epoch (int): unused (the audio is the same every epoch).
        sample_rate (int): rate of the waveform.
        min_samples (int, optional): one listener frame of the model. (Default: ``1``)
        lowercase (bool, optional): transcript normalisation. (Default: ``True``)
        keep_punctuation (str, optional): transcript normalisation. (Default: ``"'"``)
        charset (frozenset or None, optional): characters the model spells; others are dropped
            (validation and test, ``data.oov_policy: drop``). (Default: ``None``)
        durations (tuple or None, optional): ``(shortest, longest or None)`` seconds of the training
            utterances kept; those outside, or without text, are left out. (Default: ``None``)
    """
    if UNREADABLE in item:
        return BadSample(item["where"], item[UNREADABLE])
    text = normalize_text(item["text"], lowercase=lowercase, keep_punctuation=keep_punctuation)
    if durations is not None:
        shortest, longest = durations
        if not text or item["duration"] < shortest or (longest is not None and item["duration"] > longest):
            return None
    if charset is not None:
        text = map_out_of_vocabulary(text, charset, policy="drop")
    source = item["source"]
    try:
        wave = load_audio_bytes(item["audio"], source, sample_rate)
    except AudioError as err:
        return BadSample(source, str(err).removeprefix(f"{source}: "))
    if len(wave) < min_samples:
        return BadSample(source, f"{len(wave)} samples, shorter than one listener frame ({min_samples} samples)")
    return wave, text, item["key"]


def duration_buckets(
    items: list[tuple[torch.Tensor, str, str]], rng: random.Random, batch_size: int, max_frames: int | None, sample_rate: int
) -> list[list[tuple[torch.Tensor, str, str]]]:
    """A window of decoded utterances sorted by length (ties at random) and cut into batches of at
    most ``batch_size`` utterances and ``max_frames`` padded 10 ms frames (an utterance longer than
    that gets a batch of its own), as :class:`~speech_attend.data.sampler.BucketBatchSampler` cuts a corpus."""
    frames = [max(1, len(wave) * FRAMES_PER_SECOND // sample_rate) for wave, _, _ in items]
    ties = [rng.random() for _ in items]
    order = sorted(range(len(items)), key=lambda i: (frames[i], ties[i]))
    batches: list[list] = []
    batch: list[int] = []
    for index in order:  # ascending, so the newest item is the batch's longest
        count = len(batch) + 1
        if batch and (count > batch_size or (max_frames is not None and count * frames[index] > max_frames)):
            batches.append([items[i] for i in batch])
            batch = []
        batch.append(index)
    if batch:
        batches.append([items[i] for i in batch])
    return batches


class SpeechShards:
    """A checked shard folder of the recognizer, and the loaders of its splits.

    Args:
        location (str): the folder or URL.
        settings (Mapping): the data module's settings (``train_split``, ``sample_rate``,
            ``lowercase``, ``keep_punctuation``, ``batch_size``, ``max_frames``, ``shard_window``, ...,
            :class:`speech_attend.train.datamodule.SpeechDataModule`).

    Raises:
        ShardError: the folder is missing, not the recognizer's, incomplete, or written with
            another normalisation (the message names it and says what was expected).
    """

    def __init__(self, location: str, settings: Mapping):
        self.shards: Shards = open_shards(location, APP)
        self.location, self.settings = str(location), settings
        written, lowercase, keep = self.shards.settings, settings["lowercase"], settings["keep_punctuation"]
        if (written.get("lowercase"), written.get("keep_punctuation")) != (lowercase, keep):
            raise ShardError(
                f"{location}: transcripts normalised with lowercase {written.get('lowercase')} and keep_punctuation "
                f"{written.get('keep_punctuation')!r}; expected this run's data.lowercase {lowercase} and "
                f"data.keep_punctuation {keep!r} (set those, or write the shards again with --keep-case and --keep-punctuation)"
            )

    @property
    def fingerprint(self) -> str:
        return self.shards.fingerprint

    def vocabulary(self) -> Vocabulary:
        """The characters of the training text, most frequent first (as from the corpus files)."""
        counts = self.shards.vocabulary
        return Vocabulary.build(itertools.repeat(c, n) for c, n in counts.items())

    def longest(self) -> float:
        """Seconds of the training split's longest utterance."""
        return float(self.shards.split(self.settings["train_split"])["longest"])

    def check(self, stage: str | None, tokens: Sequence[str], checkpoint: bool) -> list[str]:
        """Check, before any batch is read, the splits ``stage`` needs and their characters against
        the vocabulary ``tokens`` (a ``checkpoint``'s, or the shards' own).

        Returns:
            list of str: warnings for the characters ``data.oov_policy: drop`` drops.

        Raises:
            ShardError: a split is missing, the training text has characters a checkpoint's vocabulary
                lacks, or (``data.oov_policy: error``) a validation or test transcript has.
        """
        hp, warnings = self.settings, []
        if checkpoint:
            check_vocabulary(self.shards, self.shards.vocabulary, tokens, "characters")
        names = {"fit": ["train_split", "val_split"], "validate": ["val_split"], "test": ["test_split"]}
        for split in (hp[name] for name in names.get(stage, ["train_split", "val_split", "test_split"])):
            unknown = sorted(set(self.shards.split(split)["characters"]) - set(tokens)) if split != hp["train_split"] else []
            listed = ", ".join(repr(c) for c in unknown)
            if unknown and hp["oov_policy"] == "error":
                raise ShardError(
                    f"{self.location}: the {split} transcripts have characters outside the vocabulary of the training text: "
                    f"{listed}; expected only those characters (or set data.oov_policy: drop)"
                )
            if unknown:
                warnings.append(
                    f"{split} transcripts of {self.location} have characters outside the vocabulary of the training text "
                    f"({listed}); those characters are dropped (data.oov_policy: drop)"
                )
        return warnings

    def _decode(self, min_samples: int, **options) -> Callable:
        hp = self.settings
        return partial(
            decode_utterance,
            sample_rate=hp["sample_rate"],
            min_samples=min_samples,
            lowercase=hp["lowercase"],
            keep_punctuation=hp["keep_punctuation"],
            **options,
        )

    def train_stream(self, collate: Callable, min_samples: int, rank: int, agree: Callable[[int], int] | None):
        """The training batches: a :class:`~shared.io.shards.stream.ShardStream` of duration buckets."""
        from shared.io.shards.stream import ShardStream

        hp = self.settings
        if hp["shard_window"] < hp["batch_size"]:
            raise ValueError(f"data.shard_window ({hp['shard_window']}) must hold a batch (data.batch_size {hp['batch_size']})")
        return ShardStream(
            self.shards.split_location(hp["train_split"]),
            hp["shard_window"],
            self._decode(min_samples, durations=(hp["min_duration"], hp["max_duration"])),
            partial(duration_buckets, batch_size=hp["batch_size"], max_frames=hp["max_frames"], sample_rate=hp["sample_rate"]),
            collate,
            self.fingerprint,
            seed=hp["seed"],
            num_workers=hp["num_workers"],
            rank=rank,
            agree=agree,
        )

    def eval_loader(self, name: str, collate: Callable, min_samples: int, charset: frozenset[str], world: int, rank: int):
        """Validation (``name`` ``"val"``) or test batches, read in order and bucketed by length over the
        ranks as the file reader's are: every rank has the same number, and together they hold each once."""
        from shared.io.shards.stream import ShardItems

        hp = self.settings
        split, limit = (hp["val_split"], hp["max_val_utterances"]) if name == "val" else (hp["test_split"], None)
        count = min(limit or self.shards.split(split)["items"], self.shards.split(split)["items"])
        items = ShardItems(self.shards.split_location(split), self._decode(min_samples, charset=charset), count)
        frames = [max(1, int(d * FRAMES_PER_SECOND)) for d in self.shards.split(split)["lengths"][: len(items)]]
        sampler = BucketBatchSampler(frames, hp["eval_batch_size"], None, shuffle=False, num_replicas=world, rank=rank)
        workers = hp["num_workers"]
        return DataLoader(items, batch_sampler=sampler, num_workers=workers, collate_fn=collate, persistent_workers=workers > 0)

    def statistics_batches(self, count: int, batch_size: int, min_samples: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(waveforms, lengths)`` of the first ``count`` training utterances (a random sample: the
        training split is written in a random order), for the feature statistics."""
        from shared.io.shards.stream import ShardItems

        hp = self.settings
        decode = self._decode(min_samples, durations=(hp["min_duration"], hp["max_duration"]))
        split = hp["train_split"]
        items = ShardItems(self.shards.split_location(split), decode, min(count, self.shards.split(split)["items"]))
        decoded = (items[i] for i in range(len(items)))
        usable = (item for item in decoded if item is not None and not isinstance(item, BadSample))
        while batch := list(itertools.islice(usable, batch_size)):
            padded = collate(batch)
            yield padded.waveforms, padded.lengths
