"""The captioner's shards: one image an item, written from any data set the readers know, read
back through the same image reader as the files.

An item holds ``index`` (its place in the split), ``key`` (the image's path, as the file reader
names it in the test outputs and the skip log), ``image`` (the file's bytes as they were on disk)
and, as JSON text, ``references`` (every reference caption, as words) and ``objects`` (the built-in
shapes' boxes; ``[]`` elsewhere). The training split is written in a seeded random order; the
others keep the data set's order. The marker (:mod:`shared.io.shards.layout`) adds the word counts of
the training captions, from which ``data.min_word_freq`` and ``data.max_vocab_size`` make the
vocabulary exactly as from the files.

Training batches are LitData's own: ``batch_size`` images a batch, the same number on every rank,
and an image's reference drawn by a generator seeded with the seed, the epoch and the image, so
the draw is the same in any loader process and after a resume.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import torch

from shared import Vocabulary
from shared.io.shards.layout import UNREADABLE, Shards, check_vocabulary, open_shards
from shared.io.shards.writer import DEFAULT_CHUNK_MB, file_state, fingerprint, up_to_date, write_shards
from shared.io.bad_samples import BadSample
from show_attend.data.images import ImageError, ImageTransform, load_image_bytes
from show_attend.data.readers import CaptionRecord, DataError, read_captions

__all__ = ["APP", "SPLITS", "write_caption_shards", "decode_image", "CaptionShards"]

APP = "show-attend"
SPLITS = ("train", "val", "test")


def _pack(example: tuple) -> dict:
    """``(index, image file, references, objects)`` -> the stored item (runs in the writing processes)."""
    index, path, references, objects = example
    return {
        "index": index,
        "key": str(path),
        "image": Path(path).read_bytes(),
        "references": json.dumps(references, ensure_ascii=False),
        "objects": json.dumps(objects),
    }


def write_caption_shards(
    data_dir: str | os.PathLike,
    out: str,
    splits: Sequence[str] | None = None,
    json_file: str | None = None,
    image_dir: str | None = None,
    seed: int = 0,
    chunk_mb: float = DEFAULT_CHUNK_MB,
    workers: int = 1,
    progress: bool = True,
    overwrite: bool = False,
) -> tuple[bool, dict[str, int]]:
    """Write the caption data set in ``data_dir`` (any layout :func:`~show_attend.data.readers.read_captions`
    reads) as shards in ``out`` (a folder or an object-store URL).

    Args:
        data_dir (str or PathLike): the data set's folder.
        out (str): where the shards go.
        splits (sequence of str or None, optional): ``train``, ``val``, ``test``; ``None``: those the data
            set has. (Default: ``None``)
        json_file (str or None, optional): a Karpathy split file, as ``data.json_file``. (Default: ``None``)
        image_dir (str or None, optional): its image folder, as ``data.image_dir``. (Default: ``None``)
        seed (int, optional): seed of the training split's order. (Default: ``0``)
        chunk_mb (float, optional): chunk size in megabytes. (Default: ``64``)
        workers (int, optional): writing processes. (Default: ``1``)
        progress (bool, optional): a progress bar on standard error. (Default: ``True``)
        overwrite (bool, optional): replace shards written from other inputs. (Default: ``False``)

    Returns:
        tuple: whether anything was written (``False``: ``out`` already held these shards), and the
        images of each split.

    Raises:
        DataError: the data set cannot be read, or lacks a split asked for. ShardError: ``out`` holds
        something else. WriteError: a chunk or the marker could not be written.
    """
    records, source = read_captions(Path(data_dir), json_file, image_dir)
    by_split: dict[str, list[CaptionRecord]] = {name: [r for r in records if r.split == name] for name in SPLITS}
    for name in splits or []:
        if not by_split.get(name):
            have = ", ".join(n for n, rs in by_split.items() if rs)
            raise DataError(f"{source}: no {name} images; expected one of the splits it has ({have})")
    names = list(splits) if splits else [name for name in SPLITS if by_split[name]]
    if "train" in names:
        random.Random(seed).shuffle(by_split["train"])  # any stretch of the training split is a sample of it
    settings = {"seed": seed, "chunk_mb": chunk_mb}
    key = fingerprint(
        itertools.chain(
            [{"app": APP, "settings": settings, "splits": names}],
            ([name, file_state(r.path), r.references, r.objects] for name in names for r in by_split[name]),
        )
    )
    counts = {name: len(by_split[name]) for name in names}
    if up_to_date(out, APP, key):
        return False, counts
    words = Counter(token for r in by_split.get("train", []) if "train" in names for tokens in r.references for token in tokens)
    marker = {
        "settings": settings,
        "vocabulary": {"kind": "words", "counts": dict(sorted(words.items()))},
        "splits": {name: {"source": str(source)} for name in names},
    }
    examples = {name: [(i, r.path, r.references, r.objects) for i, r in enumerate(by_split[name])] for name in names}
    written = write_shards(out, APP, examples, _pack, marker, key, chunk_mb, workers, progress, overwrite)
    return written, counts


def decode_image(
    item: dict,
    epoch: int,
    transform: ImageTransform,
    vocabulary: Vocabulary,
    train: bool,
    max_caption_length: int = 50,
    seed: int = 0,
) -> dict | BadSample:
    """A stored image as :class:`~show_attend.data.dataset.CaptionDataset` gives one: ``index``,
    ``caption`` (a reference's ids, drawn at random in training) and ``image`` `(3, S, S)` with its
    original ``size``; evaluation items also carry ``references``, ``key`` and ``objects``. A
    :class:`BadSample` when the image cannot be decoded.
    """
    if UNREADABLE in item:
        return BadSample(item["where"], item[UNREADABLE])
    references = json.loads(item["references"])
    choice = random.Random(f"{seed}/{epoch}/{item['index']}").randrange(len(references)) if train else 0
    words = references[choice][:max_caption_length]
    out = {"index": item["index"], "caption": torch.tensor(vocabulary.encode(words, add_sos=True, add_eos=True))}
    try:
        image = load_image_bytes(item["image"], item["key"])
    except ImageError as err:  # skipped and logged by shared.training.guards.SkipBadSamples
        return BadSample(item["key"], str(err).removeprefix(f"{item['key']}: "))
    out["image"], out["size"] = transform(image), image.size
    if not train:
        out["references"] = [" ".join(tokens) for tokens in references]
        out["key"] = item["key"]
        out["objects"] = json.loads(item["objects"])
    return out


def _one_batch(items: list, rng: random.Random) -> list[list]:
    return [items]  # LitData's batch is the batch: it already mixed the chunks and the items


class CaptionShards:
    """A checked shard folder of the captioner, and the loaders of its splits.

    Args:
        location (str): the folder or URL.

    Raises:
        ShardError: the folder is missing, not the captioner's, or incomplete.
    """

    def __init__(self, location: str):
        self.shards: Shards = open_shards(location, APP)
        self.location = str(location)

    @property
    def fingerprint(self) -> str:
        return self.shards.fingerprint

    def vocabulary(self, min_freq: int, max_size: int | None) -> Vocabulary:
        """The words of the training captions, as :func:`~show_attend.data.dataset.build_vocabulary` makes them."""
        counts = self.shards.vocabulary
        return Vocabulary.build((itertools.repeat(w, n) for w, n in counts.items()), min_freq=min_freq, max_size=max_size)

    def check_vocabulary(self, tokens: Sequence[str], min_freq: int, max_size: int | None) -> None:
        """Refuse shards whose training captions give words a checkpoint's vocabulary lacks."""
        kept = self.vocabulary(min_freq, max_size).to_dict()["tokens"]
        check_vocabulary(self.shards, kept, tokens, "words")

    def decoder(self, transform: ImageTransform, vocabulary: Vocabulary, train: bool, max_caption_length: int, seed: int) -> Callable:
        return partial(decode_image, transform=transform, vocabulary=vocabulary, train=train,
                       max_caption_length=max_caption_length, seed=seed)

    def train_stream(self, decode: Callable, collate: Callable, batch_size: int, seed: int, num_workers: int, rank: int):
        """The training batches: a :class:`~shared.io.shards.stream.ShardStream` of ``batch_size`` images."""
        from shared.io.shards.stream import ShardStream

        return ShardStream(self.shards.split_location("train"), batch_size, decode, _one_batch, collate, self.fingerprint,
                           seed=seed, num_workers=num_workers, fixed=True, rank=rank)

    def items(self, split: str, decode: Callable):
        """Split ``split`` as a map-style dataset, in order (validation and test)."""
        from shared.io.shards.stream import ShardItems

        return ShardItems(self.shards.split_location(split), decode, self.shards.split(split)["items"])
