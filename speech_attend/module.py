"""The LightningModule: the LAS model, its loss, and validation/test by beam search.

Loss (the strong recipes of REFERENCE section 2)::

    loss = (1 - lambda) * CE_smoothed(speller logits, y) + lambda * CTC(listener, y)

with label smoothing on the cross-entropy, scheduled sampling on the speller inputs, and a
CTC weight ``lambda`` that can fall linearly from ``ctc_weight`` to ``ctc_weight_final``.
Validation and test decode every utterance with the batched beam search, rescore with CTC and
compute WER/CER over the whole split (not averaged per batch); ``test`` also writes
``test_metrics.json`` into the run directory.

Everything inference needs (architecture, feature settings, decoding settings, vocabulary) is
saved by ``save_hyperparameters`` as plain data, so a checkpoint loads with
``torch.load(weights_only=True)`` and ``transcribe`` rebuilds the model from it alone.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_info
from torch.nn import functional as F

from shared import Vocabulary
from shared.metrics import speech_metrics
from shared.robust import zero_loss

from .data import Batch
from .features import FeatureConfig
from .model import LAS, DecodeConfig, LASConfig

__all__ = ["SpeechRecognizer", "build_model", "TEST_METRICS_FILE"]

TEST_METRICS_FILE = "test_metrics.json"


def _as(cls, value):
    """A dataclass from itself or from a plain dict (as checkpoints store it)."""
    return value if isinstance(value, cls) else cls(**(value or {}))


def build_model(config: dict) -> tuple[LAS, Vocabulary, DecodeConfig]:
    """Rebuild the model, vocabulary and decoding settings from saved hyper-parameters.

    Args:
        config (dict): a checkpoint's ``hyper_parameters`` or an exported ``config.json``.
    """
    if not config.get("vocabulary"):
        raise ValueError("the model config has no vocabulary; was it saved by speech-attend?")
    vocabulary = Vocabulary(config["vocabulary"])
    model = LAS(_as(LASConfig, config.get("las")), _as(FeatureConfig, config.get("features")), len(vocabulary))
    return model, vocabulary, _as(DecodeConfig, config.get("decoding"))


class SpeechRecognizer(pl.LightningModule):
    """Listen, Attend and Spell, trained with joint CTC.

    Args:
        las (LASConfig): architecture.
        features (FeatureConfig): front end and SpecAugment.
        decoding (DecodeConfig): beam search for validation, test and transcribe.
        vocabulary (list[str] or None): output characters without the specials; ``None``
            takes the data module's (built from the training text) at the start of ``fit``.
        learning_rate (float): peak learning rate of AdamW. (Default: ``1e-3``)
        weight_decay (float): AdamW weight decay. (Default: ``1e-5``)
        warmup_steps (int): linear warm-up, then cosine decay to ``final_lr_ratio`` of the peak
            at the last step. (Default: ``500``)
        final_lr_ratio (float): (Default: ``0.05``)
        label_smoothing (float): on the speller's cross-entropy. (Default: ``0.1``)
        sampling_rate (float): scheduled sampling probability, reached linearly between
            ``sampling_start`` and twice that step. (Default: ``0.1``)
        sampling_start (int): steps of pure teacher forcing first. (Default: ``1000``)
        ctc_weight (float): lambda at the start. (Default: ``0.5``)
        ctc_weight_final (float or None): lambda at the last step, linear in between;
            ``None`` keeps ``ctc_weight``. (Default: ``None``)
        guided_attention (float): weight of the guided-attention loss (Tachibana et al. 2017),
            which penalises attention far from the diagonal ``l / L = u / U``; it speeds up the
            forming of the alignment where the speaking rate is roughly constant (the built-in
            corpus). 0 turns it off. (Default: ``0.0``)
        guided_attention_sigma (float): width ``g`` of the allowed band around the diagonal,
            as a fraction of the utterance. (Default: ``0.2``)
        guided_attention_steps (int or None): the weight falls linearly to 0 at this step;
            ``None`` keeps it for the whole run. (Default: ``None``)
        statistics_utterances (int): training utterances for the feature statistics. (Default: ``2000``)
    """

    def __init__(
        self,
        las: LASConfig = LASConfig(),
        features: FeatureConfig = FeatureConfig(),
        decoding: DecodeConfig = DecodeConfig(),
        vocabulary: list[str] | None = None,
        learning_rate: float = 1e-3,
        weight_decay: float = 1e-5,
        warmup_steps: int = 500,
        final_lr_ratio: float = 0.05,
        label_smoothing: float = 0.1,
        sampling_rate: float = 0.1,
        sampling_start: int = 1000,
        ctc_weight: float = 0.5,
        ctc_weight_final: float | None = None,
        guided_attention: float = 0.0,
        guided_attention_sigma: float = 0.2,
        guided_attention_steps: int | None = None,
        statistics_utterances: int = 2000,
    ):
        super().__init__()
        las, features, decoding = _as(LASConfig, las), _as(FeatureConfig, features), _as(DecodeConfig, decoding)
        if not 0.0 <= ctc_weight <= 1.0 or not 0.0 <= (ctc_weight if ctc_weight_final is None else ctc_weight_final) <= 1.0:
            raise ValueError(f"ctc weights must be in [0, 1], got {ctc_weight} and {ctc_weight_final}")
        if ctc_weight > 0 and not las.ctc_upsample:
            raise ValueError("ctc_weight > 0 needs a CTC head: set las.ctc_upsample >= 1")
        # Plain data only, so checkpoints load with weights_only=True.
        self.save_hyperparameters(ignore=["las", "features", "decoding"])
        self.hparams.update(las=asdict(las), features=asdict(features), decoding=asdict(decoding))
        self.decoding = decoding
        self.model: LAS | None = None
        self.vocabulary: Vocabulary | None = None
        if vocabulary is not None:
            self._build(Vocabulary(vocabulary))
        self._outputs: dict[str, list[tuple[str, str]]] = {}  # stage -> (reference, hypothesis)
        self._loss_totals: dict[str, list] = {}  # stage -> [sum of loss x utterances, utterances]
        self._total_steps: int | None = None  # set when fit configures the optimiser
        self._last_step_time: float | None = None

    def _build(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self.hparams["vocabulary"] = vocabulary.to_dict()["tokens"]
        self.model, _, _ = build_model(dict(self.hparams))

    # ------------------------------------------------------------------ set-up

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if self.model is None:
            if stage != "fit" or datamodule is None or datamodule.vocabulary is None:
                stage = getattr(stage, "value", stage)
                raise ValueError(f"{stage} needs a trained model: pass --ckpt_path with an existing .ckpt file")
            self._build(datamodule.vocabulary)
        for dataset in getattr(datamodule, "datasets", {}).values():
            dataset.min_samples = self.model.min_samples()  # a shorter clip is skipped and logged, not fatal
        if stage == "fit" and self.decoding.max_chunk_seconds is None and datamodule is not None:
            # transcribe cuts longer audio into pieces no longer than what training showed the model
            self.decoding.max_chunk_seconds = round(max(datamodule.datasets["train"].durations), 2)
            self.hparams["decoding"] = asdict(self.decoding)
        if stage == "fit" and not self.model.frontend.norm.initialised and datamodule is not None:
            start = time.time()
            frames = self.model.frontend.accumulate_statistics(
                datamodule.statistics_batches(self.hparams.statistics_utterances)
            )
            rank_zero_info(f"feature statistics from {frames} frames of training audio in {time.time() - start:.1f} s")

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.learning_rate, weight_decay=self.hparams.weight_decay)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        self._total_steps = total
        warmup, final = self.hparams.warmup_steps, self.hparams.final_lr_ratio

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ------------------------------------------------------------------ loss

    def _progress(self) -> float:
        """Fraction of training done; 1 outside ``fit`` (validate/test use the final weights)."""
        total = self._total_steps
        return min(1.0, self.global_step / total) if total else 1.0

    def ctc_weight(self) -> float:
        start, final = self.hparams.ctc_weight, self.hparams.ctc_weight_final
        return start if final is None else start + (final - start) * self._progress()

    def sampling_probability(self) -> float:
        start = self.hparams.sampling_start
        if not self.training or self.hparams.sampling_rate <= 0 or self.global_step < start:
            return 0.0
        return self.hparams.sampling_rate * min(1.0, (self.global_step - start) / max(1, start))

    def guided_attention_weight(self) -> float:
        weight, steps = self.hparams.guided_attention, self.hparams.guided_attention_steps
        if weight <= 0 or steps is None:
            return weight
        return weight * max(0.0, 1.0 - self.global_step / max(1, steps))

    def _guided_attention_loss(self, alignments: torch.Tensor, output_lengths: torch.Tensor, encoder_lengths: torch.Tensor) -> torch.Tensor:
        """Mean over output steps of ``sum_l alpha_ul * (1 - exp(-(l/L - u/U)^2 / 2g^2))`` (Tachibana et al. 2017)."""
        batch, steps, frames = alignments.shape
        u = torch.arange(steps, device=alignments.device)[None, :, None] / output_lengths[:, None, None]  # (B, U, 1)
        l = torch.arange(frames, device=alignments.device)[None, None, :] / encoder_lengths[:, None, None]  # (B, 1, L)
        penalty = 1 - torch.exp(-((l - u) ** 2) / (2 * self.hparams.guided_attention_sigma**2))  # (B, U, L)
        valid = torch.arange(steps, device=alignments.device)[None, :] < output_lengths[:, None]  # (B, U)
        per_step = (alignments.float() * penalty).sum(-1)  # (B, U)
        return per_step[valid].mean()

    def _targets(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Speller inputs ``<sos> y``, outputs ``y <eos>`` `(B, U)` and label lengths `(B,)`."""
        ids = [torch.tensor(self.vocabulary.encode(list(text)), dtype=torch.long) for text in texts]
        lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
        pad, sos, eos = self.vocabulary.pad_id, self.vocabulary.sos_id, self.vocabulary.eos_id
        inputs = torch.full((len(ids), int(lengths.max()) + 1), pad, dtype=torch.long)
        outputs = torch.full_like(inputs, pad)
        for i, x in enumerate(ids):
            inputs[i, 0], inputs[i, 1 : len(x) + 1] = sos, x
            outputs[i, : len(x)], outputs[i, len(x)] = x, eos
        return inputs.to(self.device), outputs.to(self.device), lengths.to(self.device)

    def _loss(self, batch: Batch) -> dict[str, torch.Tensor]:
        inputs, outputs, label_lengths = self._targets(batch.texts)
        out = self.model(batch.waveforms, batch.lengths, inputs, self.sampling_probability())
        attention_loss = F.cross_entropy(
            out["logits"].float().transpose(1, 2), outputs,
            ignore_index=self.vocabulary.pad_id, label_smoothing=self.hparams.label_smoothing,
        )
        losses = {"attention_loss": attention_loss}
        guided = self.guided_attention_weight() if self.training else 0.0
        if guided > 0:
            losses["guided_attention_loss"] = self._guided_attention_loss(
                out["alignments"], label_lengths + 1, out["encoder_lengths"]
            )
        weight = self.ctc_weight()
        if weight > 0:
            labels = outputs.masked_fill(outputs == self.vocabulary.eos_id, self.vocabulary.pad_id)
            ctc_loss = F.ctc_loss(
                out["ctc_log_probs"].transpose(0, 1), labels, out["ctc_lengths"], label_lengths,
                blank=LAS.blank_id, reduction="mean", zero_infinity=True,  # mean: per label, like the CE
            )
            losses["ctc_loss"] = ctc_loss
            losses["loss"] = (1 - weight) * attention_loss + weight * ctc_loss
        else:
            losses["loss"] = attention_loss
        if guided > 0:
            losses["loss"] = losses["loss"] + guided * losses["guided_attention_loss"]
        return losses

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        if not batch.batch_size:  # every file of the batch was unreadable (logged by SkipBadSamples)
            return zero_loss(self)
        losses = self._loss(batch)
        size = len(batch.texts)
        self.log("train/loss", losses["loss"], prog_bar=True, batch_size=size)
        self.log("train/attention_loss", losses["attention_loss"], batch_size=size)
        for name in ("ctc_loss", "guided_attention_loss"):
            if name in losses:
                self.log(f"train/{name}", losses[name], batch_size=size)
        now = time.perf_counter()
        if self._last_step_time is not None:  # wall time of a whole step: data, forward, backward, update
            self.log("train/seconds_per_step", now - self._last_step_time, batch_size=size)
        self._last_step_time = now
        self.log("train/ctc_weight", self.ctc_weight(), batch_size=size)
        self.log("train/sampling", self.sampling_probability(), batch_size=size)
        return losses["loss"]

    # ------------------------------------------------------------------ evaluation

    def transcribe_batch(self, waveforms: torch.Tensor, lengths: torch.Tensor, beam_size: int | None = None):
        """Texts and hypotheses (with attention) for a batch of waveforms."""
        hyps, encoder_lengths = self.model.decode(
            waveforms, lengths, self.vocabulary.sos_id, self.vocabulary.eos_id, self.decoding, beam_size
        )
        return ["".join(self.vocabulary.decode(h.tokens)) for h in hyps], hyps, encoder_lengths

    def _evaluation_step(self, batch: Batch, stage: str) -> None:
        if not batch.batch_size:
            return
        losses = self._loss(batch)
        self.log(f"{stage}/loss", losses["loss"], batch_size=len(batch.texts), sync_dist=True)
        totals = self._loss_totals.setdefault(stage, [0.0, 0])
        totals[0] += float(losses["loss"]) * len(batch.texts)
        totals[1] += len(batch.texts)
        beam = self.decoding.val_beam_size if stage == "val" else self.decoding.beam_size
        texts, _, _ = self.transcribe_batch(batch.waveforms, batch.lengths, beam)
        self._outputs.setdefault(stage, []).extend(zip(batch.texts, texts))

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluation_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluation_step(batch, "test")

    def _split_metrics(self, stage: str) -> dict[str, float]:
        pairs = self._outputs.pop(stage, [])
        total, count = self._loss_totals.pop(stage, [0.0, 0])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, (pairs, total, count))  # every rank scores the whole split
            pairs = [pair for part, _, _ in gathered for pair in part]
            total, count = sum(part_total for _, part_total, _ in gathered), sum(part_count for _, _, part_count in gathered)
        if not pairs:
            return {}
        references, hypotheses = zip(*pairs)
        metrics = speech_metrics(list(references), list(hypotheses))
        for name, value in metrics.items():
            self.log(f"{stage}/{name}", value, prog_bar=True, sync_dist=True)  # equal on every rank, so the mean is exact
        metrics["utterances"] = len(pairs)
        metrics["loss"] = total / count if count else float("nan")  # mean over the split's utterances
        return metrics

    def on_validation_epoch_end(self) -> None:
        self._split_metrics("val")
        self._last_step_time = None  # the next step's time would include validation

    def on_test_epoch_end(self) -> None:
        metrics = self._split_metrics("test")
        run_dir = self.trainer.log_dir or self.trainer.default_root_dir  # on every rank: a broadcast under DDP
        if metrics and self.trainer.is_global_zero:
            path = Path(run_dir) / TEST_METRICS_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(metrics, indent=2) + "\n")
            rank_zero_info(f"test metrics written to {path}: WER {metrics['wer']:.4f}  CER {metrics['cer']:.4f}")
