"""The captioner's LightningDataModule: one caption data set, its vocabulary, its loaders.

It reads any data set :func:`show_attend.data.readers.read_captions` knows from ``data_dir`` (a
manifest, a Hugging Face imagefolder, or a Karpathy split file with its images in the folder
:func:`~show_attend.data.readers.find_image_dir` finds), and takes the vocabulary from the
training captions (or, when evaluating or resuming a checkpoint, from the checkpoint, handed
over by the command line). With ``feature_cache`` set, the loaders serve the cached features of
the encoder :meth:`CaptionDataModule.use_encoder` was given, computed once when the loaders are
first asked for, after a checkpoint's weights are in place (:mod:`show_attend.data.feature_cache`).

With ``shards`` set (a folder or URL written by ``show-attend prepare shards``), the images stream
from LitData chunks instead (:mod:`show_attend.data.shards`): the vocabulary comes from the shards'
marker, and the training loader's position travels in the checkpoints, so a run stopped mid-epoch
goes on from the next unseen image. ``data_dir`` is then not read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

from shared import Vocabulary
from shared.io.model_files import fingerprint
from show_attend.data.dataset import CaptionDataset, build_vocabulary, collate
from show_attend.data.feature_cache import CachedSplit, FeatureCache
from show_attend.data.images import image_transform
from show_attend.data.readers import CaptionRecord, DataError, read_captions
from show_attend.data.shards import CaptionShards

__all__ = ["CaptionDataModule"]


class CaptionDataModule(pl.LightningDataModule):
    """Splits, vocabulary and loaders for one caption data set.

    Args:
        data_dir (str): the data set's folder: ``captions.jsonl``/``.csv`` (a manifest),
            ``metadata.jsonl``/``.csv`` (an imagefolder, also in split folders), or a Karpathy
            split file with, by default, the images. (Default: ``data/shapes``)
        json_file (str or None): a Karpathy split file, relative to ``data_dir`` unless absolute,
            read whatever else ``data_dir`` holds; by default the layout is recognised and a
            Karpathy data set is the one ``dataset_*.json`` in ``data_dir``.
        image_dir (str or None): Karpathy data sets: the image folder, relative to ``data_dir``
            unless absolute; by default the first of ``images``, ``Images``,
            ``Flicker8k_Dataset``, ... and ``data_dir`` itself that holds the split file's images.
        image_size (int): images are resized to ``image_size x image_size``. (Default: ``224``)
        batch_size (int): training batch size. (Default: ``64``)
        eval_batch_size (int or None): validation/test batch size; ``batch_size`` when ``None``.
        num_workers (int): loader processes (0 loads in the training process). (Default: ``0``)
        min_word_freq (int): rarer training words become ``<unk>``. (Default: ``5``)
        max_vocab_size (int or None): keep at most this many words. (Default: ``None``)
        max_caption_length (int): training captions are cut to this many words. (Default: ``50``)
        augment (bool): random crop and colour jitter in training. (Default: ``False``)
        keep_images (bool): keep the decoded, resized images in memory after their first read
            (``3 * image_size**2`` bytes each, in every loader process), so later epochs and
            validations skip decoding; for data sets that fit in memory. The training split is
            still read afresh with ``augment``. (Default: ``False``)
        feature_cache (str or None): folder for cached encoder features (frozen encoders only);
            filled on first use. (Default: ``None``)
        vocabulary (list of str or None): the words, when they come from a checkpoint rather
            than from the training captions; set by the command line. (Default: ``None``)
        shards (str or None): a shard folder or object-store URL written by ``show-attend prepare
            shards``, streamed instead of ``data_dir`` (module docstring); ``keep_images`` does not
            apply. (Default: ``None``)
    """

    def __init__(
        self,
        data_dir: str = "data/shapes",
        json_file: str | None = None,
        image_dir: str | None = None,
        image_size: int = 224,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        min_word_freq: int = 5,
        max_vocab_size: int | None = None,
        max_caption_length: int = 50,
        augment: bool = False,
        keep_images: bool = False,
        feature_cache: str | None = None,
        vocabulary: list[str] | None = None,
        shards: str | None = None,
    ):
        super().__init__()
        if image_size < 16 or batch_size < 1:
            raise DataError(f"image_size must be >= 16 and batch_size >= 1, got {image_size} and {batch_size}")
        if feature_cache and augment:
            raise DataError("data.feature_cache stores fixed features, so it cannot be combined with data.augment")
        self.save_hyperparameters(ignore=["vocabulary"])
        self.shards = CaptionShards(shards) if shards else None
        self._stream = None  # the training ShardStream, told which batches are trained on
        self.image_size, self.batch_size = image_size, batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers, self.augment, self.max_caption_length = num_workers, augment, max_caption_length
        self.feature_cache, self.keep_images = feature_cache, keep_images
        if self.shards is not None:
            if feature_cache:
                raise DataError("data.feature_cache is not available with data.shards, which streams the images in chunks")
            self.records, self.source = [], Path(shards)
            self.vocabulary = Vocabulary(vocabulary) if vocabulary else self.shards.vocabulary(min_word_freq, max_vocab_size)
            if vocabulary:  # a checkpoint's: the shards' captions must be written with it
                self.shards.check_vocabulary(vocabulary, min_word_freq, max_vocab_size)
        else:
            # Relative paths are inside data_dir, so `--data.data_dir` moves a whole config to another copy.
            self.records, self.source = read_captions(Path(data_dir), json_file or None, image_dir)
            if not any(r.split == "train" for r in self.records):
                raise DataError(f"{self.source}: no train (or restval) images")
            self.vocabulary = (
                Vocabulary(vocabulary) if vocabulary else build_vocabulary(self.records, min_word_freq, max_vocab_size)
            )
        self._encoder: nn.Module | None = None
        self._cached: dict[str, CachedSplit] = {}

    @property
    def vocabulary_tokens(self) -> list[str]:
        """The vocabulary as a plain list (what the model saves in its checkpoint)."""
        return self.vocabulary.to_dict()["tokens"]

    def use_encoder(self, encoder: nn.Module) -> None:
        """The frozen image encoder whose features the cache holds (``images (B, 3, S, S) ->
        features (B, L, D)``); needed only with ``feature_cache``."""
        self._encoder, self._cached = encoder, {}

    def split(self, name: str) -> list[CaptionRecord]:
        return [r for r in self.records if r.split == name]

    def dataset(self, name: str) -> CaptionDataset:
        records = self.split(name)
        if not records:
            raise DataError(f"{self.source}: the {name} split is empty")
        train = name == "train"
        transform = image_transform(self.image_size, augment=train and self.augment)
        cached = self._cached_split(name, records) if self.feature_cache else None
        dataset = CaptionDataset(
            records,
            self.vocabulary,
            transform,
            train,
            self.max_caption_length,
            None if cached is None else cached.features,
            keep_images=self.keep_images and cached is None and not transform.random,
        )
        dataset.unreadable = {} if cached is None else cached.unreadable
        return dataset

    @torch.no_grad()
    def _cached_split(self, name: str, records: list[CaptionRecord]) -> CachedSplit:
        """The split's cached features: built by rank zero if missing, then read by every rank."""
        if name in self._cached:
            return self._cached[name]
        if self._encoder is None:
            raise DataError("data.feature_cache needs the model's encoder; it is handed over by the show-attend command line")
        encoder = self._encoder
        key = {
            "encoder": fingerprint(encoder.state_dict()),
            "image_size": self.image_size,
            "json_file": str(self.source.resolve()),
        }
        cache = FeatureCache(self.feature_cache, key)
        trainer = self.trainer
        if trainer is None or trainer.is_global_zero:
            if cache.load(name, len(records)) is None:
                device = next((p.device for p in encoder.parameters()), torch.device("cpu"))
                was_training = encoder.training
                encoder.eval()
                try:
                    cache.write(name, records, encoder, self.image_size, device, self.eval_batch_size, self.num_workers)
                finally:
                    encoder.train(was_training)
        if trainer is not None:
            trainer.strategy.barrier("feature_cache")  # the others wait for rank zero's file
        cached = cache.load(name, len(records))
        if cached is None:
            raise DataError(f"{self.feature_cache}: the {name} features could not be read back after they were written")
        self._cached[name] = cached
        return cached

    def setup(self, stage: str | None = None) -> None:
        if self.shards is not None:  # the splits the stage needs, before any batch is read
            for name in {"fit": ["train", "val"], "validate": ["val"], "test": ["test"]}.get(stage, ["train", "val", "test"]):
                self.shards.shards.split(name)

    def _shard_loader(self, name: str):
        """The training stream or an evaluation loader of the shards (:mod:`show_attend.data.shards`)."""
        train = name == "train"
        transform = image_transform(self.image_size, augment=train and self.augment)
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))  # the run's seed_everything: LitData's shuffle, the references drawn
        decode = self.shards.decoder(transform, self.vocabulary, train, self.max_caption_length, seed)
        if not train:
            return DataLoader(
                self.shards.items(name, decode),
                batch_size=self.eval_batch_size,
                num_workers=self.num_workers,
                collate_fn=collate,
                persistent_workers=self.num_workers > 0,
            )
        rank = self.trainer.global_rank if self.trainer is not None else 0
        self._stream = self.shards.train_stream(decode, collate, self.batch_size, seed, self.num_workers, rank)
        return self._stream

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        """Tells the shards' stream which batch is being trained on (its position)."""
        if self._stream is not None and self.trainer is not None and self.trainer.training:
            self._stream.mark_consumed()
        return batch

    def _loader(self, name: str) -> DataLoader:
        if self.shards is not None:
            return self._shard_loader(name)
        train = name == "train"
        return DataLoader(
            self.dataset(name),
            batch_size=self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            drop_last=False,
            num_workers=self.num_workers,
            collate_fn=collate,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")
