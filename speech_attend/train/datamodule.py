"""The recognizer's LightningDataModule: a corpus, its character vocabulary, bucketed loaders.

It reads any corpus :func:`speech_attend.data.readers.read_corpus` knows (LibriSpeech layout,
Common Voice, a manifest) from ``data_dir``, builds the character vocabulary from the training
text (or takes a checkpoint's, handed over by the command line), applies the out-of-vocabulary
policy (``oov_policy``) to the validation and test transcripts, and serves length-bucketed
batches of padded waveforms with their transcripts as the speller's ids. ``cache_audio`` keeps
every waveform in memory (the built-in corpus fits easily), so each file is decoded once per run
instead of once per epoch.

With ``feature_cache`` set (a pretrained listener kept frozen), the loaders serve the frozen
encoder's states instead of audio, computed once per split when the loaders are first asked for,
after a checkpoint's weights are in place (:mod:`speech_attend.data.encoder_cache`); the training
conditions are drawn into ``cache_views - 1`` further copies of each utterance there.

With ``shards`` set (a folder or URL written by ``speech-attend prepare shards``), the corpus is
streamed from LitData chunks instead (:mod:`speech_attend.data.shards`): the vocabulary comes from
the shards' marker, training batches are duration buckets within windows of ``shard_window``
utterances, the same number on every rank, and the loader's position travels in the checkpoints,
so a run stopped mid-epoch goes on from the next unseen utterance. ``data_dir`` is then not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn
from torch.utils.data import DataLoader

from shared import Vocabulary
from speech_attend.data.augment import AugmentConfig, AugmentedCollate
from speech_attend.data.dataset import Collate, SpeechDataset, build_vocabulary, collate
from speech_attend.data.encoder_cache import CachedSpeechDataset, CachedStates, Encode, EncoderCache
from speech_attend.data.readers import read_corpus
from speech_attend.data.sampler import BucketBatchSampler
from speech_attend.data.shards import SpeechShards
from speech_attend.data.text import OOV_POLICIES, map_out_of_vocabulary, unknown_characters

__all__ = ["SpeechDataModule"]


def _listed(characters: list[str]) -> str:
    return ", ".join(repr(c) for c in characters)


class SpeechDataModule(pl.LightningDataModule):
    """Splits, vocabulary and bucketed loaders for a speech corpus.

    Args:
        data_dir (str or None): the corpus folder (LibriSpeech layout, Common Voice, or manifests);
            not read with ``shards``. (Default: ``None``)
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
        keep_punctuation (str, optional): punctuation characters kept in transcripts: apostrophes
            by default ("don't"); "" keeps none. (Default: ``"'"``)
        min_duration (float, optional): shorter training utterances are left out, seconds. (Default: ``0.1``)
        max_duration (float or None, optional): longer training utterances are left out. (Default: ``None``)
        max_train_utterances (int or None, optional): use only the first N training utterances. (Default: ``None``)
        max_val_utterances (int or None, optional): validate on the first N only (faster
            epochs; test always uses the whole split). (Default: ``None``)
        curriculum_epochs (int, optional): first epochs ordered shortest batches first
            (see :class:`BucketBatchSampler`). (Default: ``0``)
        seed (int, optional): seed of the batch order. (Default: ``0``)
        oov_policy (str, optional): what to do with validation and test transcripts that hold
            characters outside the vocabulary: ``"drop"`` removes those characters
            (:func:`~speech_attend.data.text.map_out_of_vocabulary`) and warns once per split with the
            number of transcripts changed and the characters; ``"error"`` stops ``setup`` with an
            error naming the utterance and the characters. (Default: ``"drop"``)
        augment (AugmentConfig or None, optional): acoustic conditions drawn for every training
            batch (:mod:`speech_attend.data.augment`); validation and test data are never augmented.
            (Default: ``None``)
        vocabulary (list of str or None, optional): the characters, when they come from a
            checkpoint rather than from the training text; set by the command line. (Default: ``None``)
        references (bool, optional): training batches carry each utterance's reference, its audio
            without the noise, gain, offset and rounding (``Batch.references``); linked from
            ``model.consistency_weight`` by the command line. (Default: ``False``)
        feature_cache (str or None, optional): folder for the pretrained listener's cached frozen
            states (``model.las.listener: pretrained``); the command line hands the model's encoder
            over. (Default: ``None``)
        cache_views (int, optional): copies of each training utterance in the cache: the audio as it
            is, then ``cache_views - 1`` under the training conditions of ``augment``. (Default: ``1``)
        shards (str or None, optional): a shard folder or object-store URL written by ``speech-attend
            prepare shards``, streamed instead of ``data_dir`` (module docstring); ``cache_audio`` does
            not apply, and the batches' count is known only at an epoch's end, so a run needs
            ``trainer.max_steps``. (Default: ``None``)
        shard_window (int, optional): training utterances read together and cut into duration buckets;
            larger windows group lengths more tightly and hold more audio in memory (each loader
            process two windows). (Default: ``256``)
    """

    def __init__(
        self,
        data_dir: str | None = None,
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
        vocabulary: list[str] | None = None,
        references: bool = False,
        feature_cache: str | None = None,
        cache_views: int = 1,
        shards: str | None = None,
        shard_window: int = 256,
    ):
        super().__init__()
        if shards:
            streamed = (
                ("feature_cache", feature_cache),
                ("max_train_utterances", max_train_utterances),
                ("curriculum_epochs", curriculum_epochs),
            )
            for name, value in streamed:
                if value:
                    raise ValueError(f"data.{name} is not available with data.shards, which streams the corpus in chunks")
        elif not data_dir:
            raise ValueError("data.data_dir (a corpus folder) or data.shards (a shard folder) is required")
        if oov_policy not in OOV_POLICIES:
            raise ValueError(f"oov_policy must be one of {', '.join(OOV_POLICIES)}, got {oov_policy!r}")
        if augment is not None:
            augment.check(sample_rate)
        if cache_views < 1:
            raise ValueError(f"data.cache_views must be at least 1, got {cache_views}")
        if feature_cache and augment is not None and cache_views < 2:
            raise ValueError(
                "data.feature_cache with data.augment draws the conditions into the cache: set data.cache_views >= 2"
            )
        if feature_cache and references:
            raise ValueError("data.feature_cache serves encoder states, not the audio the consistency loss compares")
        self.save_hyperparameters(ignore=["vocabulary", "augment"])
        self.hparams.update(augment=None if augment is None else asdict(augment))  # plain data in checkpoints
        self.augment = augment
        self._augmented: AugmentedCollate | None = None
        self.data_dir = Path(data_dir) if data_dir else None
        self.datasets: dict[str, SpeechDataset] = {}
        self._shards: SpeechShards | None = None
        self._stream = None  # the training ShardStream, told which batches are trained on
        self._vocabulary = Vocabulary(vocabulary) if vocabulary else None
        self._min_samples = 1
        self.feature_cache = feature_cache
        self._encode: Encode | None = None
        self._encoder_key: dict | None = None
        self._cached: dict[str, CachedStates] = {}

    @property
    def vocabulary(self) -> Vocabulary:
        """The characters of the training text, or the checkpoint's when one was given."""
        if self._vocabulary is None:
            shards = self._shard_data()
            self._vocabulary = shards.vocabulary() if shards else build_vocabulary(self._training_set().texts)
        return self._vocabulary

    @property
    def vocabulary_tokens(self) -> list[str]:
        """The vocabulary as a plain list (what the model saves in its checkpoint)."""
        return self.vocabulary.to_dict()["tokens"]

    def _shard_data(self) -> SpeechShards | None:
        """The checked shard folder of ``data.shards`` (read once), or ``None`` for a corpus folder."""
        if self.hparams.shards and self._shards is None:
            self._shards = SpeechShards(self.hparams.shards, self.hparams)
        return self._shards

    def use_encoder(self, encode: Encode, key: dict) -> None:
        """The frozen encoder whose states the cache holds (``waveforms (B, N), lengths (B,) ->
        states (B, L, d), lengths (B,)``) and what its states depend on; needed only with ``feature_cache``."""
        self._encode, self._encoder_key, self._cached = encode, key, {}

    def _cached_split(self, name: str) -> CachedStates:
        """The split's cached states: built by rank zero if missing, then read by every rank."""
        if name in self._cached:
            return self._cached[name]
        if self._encode is None:
            raise ValueError(
                "data.feature_cache needs the model's pretrained listener; it is handed over by the speech-attend "
                "command line (model.las.listener: pretrained)"
            )
        dataset = self.datasets[name]
        views, augment = (self.hparams.cache_views, self.augment) if name == "train" else (1, None)
        cache = EncoderCache(self.feature_cache, self._encoder_key)
        trainer = self.trainer
        if trainer is None or trainer.is_global_zero:
            if cache.load(name, dataset, views, augment, self.hparams.seed) is None:
                cache.write(name, dataset, self._encode, views, augment, self.hparams.seed, progress=True)
        if trainer is not None:
            trainer.strategy.barrier("feature_cache")  # the others wait for rank zero's files
        cached = cache.load(name, dataset, views, augment, self.hparams.seed)
        if cached is None:
            raise ValueError(f"{self.feature_cache}: the {name} states could not be read back after they were written")
        self._cached[name] = cached
        return cached

    def set_min_samples(self, samples: int) -> None:
        """Clips shorter than ``samples`` (one listener frame of the model) are skipped and logged."""
        self._min_samples = samples
        for dataset in self.datasets.values():
            dataset.min_samples = samples

    def training_durations(self) -> list[float]:
        """Seconds of every training utterance used (with shards, the longest alone)."""
        if self._shard_data():
            return [self._shards.longest()]
        return list(self._training_set().durations)

    def _dataset(self, split: str, limit: int | None = None, training: bool = False) -> SpeechDataset:
        hp = self.hparams
        utterances = read_corpus(self.data_dir, split)[:limit]
        dataset = SpeechDataset(utterances, hp.sample_rate, hp.lowercase, hp.keep_punctuation, hp.cache_audio)
        if training:  # drop what the model cannot or should not learn from
            keep = [
                i
                for i, (d, t) in enumerate(zip(dataset.durations, dataset.texts))
                if t and d >= hp.min_duration and (hp.max_duration is None or d <= hp.max_duration)
            ]
            if not keep:
                raise ValueError(
                    f"{self.data_dir}: no training utterance between {hp.min_duration} and {hp.max_duration} s with text"
                )
            dataset = dataset.subset(keep)
        dataset.min_samples = self._min_samples
        return dataset

    def _training_set(self) -> SpeechDataset:
        if "train" not in self.datasets:
            hp = self.hparams
            self.datasets["train"] = self._dataset(hp.train_split, hp.max_train_utterances, training=True)
        return self.datasets["train"]

    def setup(self, stage: str | None = None) -> None:
        hp = self.hparams
        if self._shard_data():
            given = self._vocabulary is not None  # a checkpoint's: the shards' text must be spelt with it
            for warning in self._shards.check(stage, self.vocabulary_tokens, checkpoint=given):
                rank_zero_warn(warning)
            return
        if stage in ("fit", None):
            self._training_set()
        if stage in ("fit", "validate", None) and "val" not in self.datasets:
            self.datasets["val"] = self._apply_oov_policy(self._dataset(hp.val_split, hp.max_val_utterances), hp.val_split)
        if stage in ("test", None) and "test" not in self.datasets:
            self.datasets["test"] = self._apply_oov_policy(self._dataset(hp.test_split), hp.test_split)

    def _apply_oov_policy(self, dataset: SpeechDataset, split: str) -> SpeechDataset:
        """Drop (with one warning) or refuse the characters of ``dataset``'s transcripts that the
        model cannot spell, as ``oov_policy`` says; ``dataset.texts`` is changed in place."""
        charset = set(self.vocabulary_tokens)
        changed, unknown = 0, set()
        for index, text in enumerate(dataset.texts):
            missing = unknown_characters(text, charset)
            if not missing:
                continue
            if self.hparams.oov_policy == "error":
                utterance = dataset.utterances[index]
                raise ValueError(
                    f"{utterance.audio_path}: the {split} transcript of {utterance.utt_id} has characters outside the "
                    f"vocabulary of the training text: {_listed(missing)}; expected only those characters (or set data.oov_policy: drop)"
                )
            dataset.texts[index] = map_out_of_vocabulary(text, charset, policy="drop")
            changed += 1
            unknown.update(missing)
        if changed:
            rank_zero_warn(
                f"{changed} of {len(dataset)} {split} transcripts have characters outside the vocabulary of the training text "
                f"({_listed(sorted(unknown))}); those characters were dropped (data.oov_policy: drop)"
            )
        return dataset

    def statistics_batches(self, max_utterances: int = 2000, batch_size: int = 32) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(waveforms, lengths)`` of up to ``max_utterances`` training utterances, for feature statistics."""
        if self._shard_data():
            yield from self._shards.statistics_batches(max_utterances, batch_size, self._min_samples)
            return
        dataset = self._training_set()
        step = max(1, len(dataset) // max_utterances)  # an even spread over the corpus, the same on every rank
        indices = list(range(0, len(dataset), step))[:max_utterances]
        for start in range(0, len(indices), batch_size):
            batch = collate([dataset[i] for i in indices[start : start + batch_size]])
            if batch.batch_size:  # unreadable files are left out here too
                yield batch.waveforms, batch.lengths

    def _collate(self, name: str, step: int) -> Collate:
        collate_fn = Collate(self.vocabulary)  # transcripts become the speller's ids here, not in the module
        if name == "train" and self.augment is not None and not self.feature_cache:  # never the validation or test audio
            collate_fn = self._augmented = AugmentedCollate(
                collate_fn, self.augment, self.hparams.sample_rate, step, references=self.hparams.references
            )
        return collate_fn

    def _shard_loader(self, name: str):
        """The training stream or an evaluation loader of the shards (:mod:`speech_attend.data.shards`)."""
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        collate_fn = self._collate(name, trainer.global_step if trainer is not None else 0)
        if name != "train":
            return self._shards.eval_loader(name, collate_fn, self._min_samples, frozenset(self.vocabulary_tokens), world, rank)
        if trainer is not None and trainer.max_steps == -1:
            raise ValueError(
                "data.shards serves duration buckets whose number per epoch is known only at its end: "
                "set trainer.max_steps (and trainer.val_check_interval in steps)"
            )
        from shared.io.shards.stream import equal_counts  # LitData loads only here

        self._stream = self._shards.train_stream(collate_fn, self._min_samples, rank, equal_counts())
        return self._stream

    def _loader(
        self, name: str, batch_size: int, max_frames: int | None, shuffle: bool, curriculum_epochs: int = 0
    ) -> DataLoader:
        if self._shard_data():
            return self._shard_loader(name)
        if name not in self.datasets:
            raise ValueError(f"the {name} split is not set up (call setup first)")
        dataset = self.datasets[name]
        if self.feature_cache:
            dataset = CachedSpeechDataset(dataset, self._cached_split(name), random_view=name == "train")
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        sampler = BucketBatchSampler(
            dataset.frames(),
            batch_size,
            max_frames,
            shuffle=shuffle,
            seed=self.hparams.seed,
            num_replicas=world,
            rank=rank,
            curriculum_epochs=curriculum_epochs,
        )
        workers = self.hparams.num_workers
        collate_fn = self._collate(name, trainer.global_step if trainer is not None else 0)
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            num_workers=workers,
            collate_fn=collate_fn,
            persistent_workers=workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        """Keeps the augmentation's strength on the training step (a few batches late with loader
        processes), and tells the shards' stream which batch is being trained on (its position)."""
        if self.trainer is not None and self.trainer.training:
            if self._augmented is not None:
                self._augmented.set_step(self.trainer.global_step)
            if self._stream is not None:
                self._stream.mark_consumed()
        return batch

    def train_dataloader(self) -> DataLoader:
        hp = self.hparams
        return self._loader("train", hp.batch_size, hp.max_frames, shuffle=True, curriculum_epochs=hp.curriculum_epochs)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.hparams.eval_batch_size, None, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.hparams.eval_batch_size, None, shuffle=False)
