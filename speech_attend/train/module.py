"""The recognizer's LightningModule: the loss, the optimiser, and validation/test by beam search.

Loss (the strong recipes for attention-based ASR)::

    loss = (1 - lambda) * CE_smoothed(speller logits, y) + lambda * CTC(listener, y)

with label smoothing on the cross-entropy, scheduled sampling on the speller inputs, and a
CTC weight ``lambda`` that can fall linearly from ``ctc_weight`` to ``ctc_weight_final``.

With ``consistency_weight`` ``w > 0`` the listener also learns to hear an utterance under noise,
gain, offset and rounding as it hears the same utterance without them (invariant representation
learning, Liang et al. 2018): its states ``h`` of the training audio are drawn toward its states
``r`` of the reference audio (``Batch.references``: the same voice, speed, room and channel,
nothing added), which get no gradient, over the frames of the utterances whose audio differs::

    loss += w * mean_t ||h_t - sg(r_t)||^2 / ||sg(r_t)||^2
Validation and test decode every utterance with the batched beam search, rescore with CTC and
compute WER/CER over the whole split (:class:`shared.training.module.AttendModule`).

Everything inference needs (architecture, feature settings, decoding settings, vocabulary) is
saved by ``save_hyperparameters`` as plain data, so a checkpoint loads with
``torch.load(weights_only=True)`` and ``transcribe`` rebuilds the model from it alone
(:func:`speech_attend.model.las.build_recognizer`). The feature statistics are buffers of the model.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace

import torch
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
from torch.nn import functional as F

from shared import Vocabulary, lengths_to_mask
from shared.io.config import as_dataclass
from shared.training.guards import zero_loss
from shared.training.module import AttendModule
from shared.training.schedule import OptimizerConfig, with_schedule
from speech_attend.data.dataset import Batch
from speech_attend.evaluate.metrics import speech_metrics
from speech_attend.model.features import FeatureConfig
from speech_attend.model.las import LAS, DecodeConfig, LASConfig, build_recognizer
from speech_attend.model.migrations import migrate_hyper_parameters, optimizer_states_from_lstm_cells, training_colour_from_model
from speech_attend.model.whisper_weights import load_whisper_encoder

__all__ = ["RecognizerModule"]

_CONFIGS = ((LASConfig, "las"), (FeatureConfig, "features"), (DecodeConfig, "decoding"))  # the model's, as hparams name them


class RecognizerModule(AttendModule):
    """Listen, Attend and Spell, trained with joint CTC.

    Args:
        vocabulary (list[str]): output characters without the specials, linked from the data
            module (the characters of the training text).
        las (LASConfig): architecture.
        features (FeatureConfig): front end and SpecAugment.
        decoding (DecodeConfig): beam search for validation, test and transcribe.
        optimizer (OptimizerConfig): AdamW and the learning-rate schedule. (Default: ``lr`` 1e-3,
            weight decay 1e-5, 500 warm-up steps, cosine decay to 5% of the peak)
        label_smoothing (float): on the speller's cross-entropy. (Default: ``0.1``)
        scheduled_sampling (float): the probability that a speller step reads its own previous
            prediction instead of the true character, reached linearly between
            ``scheduled_sampling_start`` and twice that step. (Default: ``0.1``)
        scheduled_sampling_start (int): steps of pure teacher forcing first. (Default: ``1000``)
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
        consistency_weight (float): weight ``w`` of the consistency loss above; 0 turns it off (and
            the training batches carry no references). (Default: ``0.0``)
        pretrained_encoder (str or None): with ``las.listener: pretrained``, the folder of its converted
            weights (``speech-attend prepare whisper``), loaded when the model is built; a resumed run
            or ``--init_from`` then puts the trained weights over them. (Default: ``None``)
    """

    app = "speech-attend"
    output_field, output_noun = "text", "transcripts"  # what the collapse measures read and name
    migrate_hyper_parameters = staticmethod(migrate_hyper_parameters)  # an older checkpoint's, for --ckpt_path

    def __init__(
        self,
        vocabulary: list[str] | None = None,
        las: LASConfig = LASConfig(),  # frozen dataclasses: a shared default cannot be changed
        features: FeatureConfig = FeatureConfig(),
        decoding: DecodeConfig = DecodeConfig(),
        optimizer: OptimizerConfig = OptimizerConfig(lr=1e-3, weight_decay=1e-5, warmup_steps=500, schedule="cosine"),
        label_smoothing: float = 0.1,
        scheduled_sampling: float = 0.1,
        scheduled_sampling_start: int = 1000,
        ctc_weight: float = 0.5,
        ctc_weight_final: float | None = None,
        guided_attention: float = 0.0,
        guided_attention_sigma: float = 0.2,
        guided_attention_steps: int | None = None,
        statistics_utterances: int = 2000,
        consistency_weight: float = 0.0,
        pretrained_encoder: str | None = None,
    ):
        super().__init__()
        if not vocabulary:
            raise ValueError("the recognizer needs a vocabulary (a list of characters), normally linked from the data module")
        saved = migrate_hyper_parameters({"las": las, "features": features, "decoding": decoding})  # dicts as saved
        las, features, decoding = (as_dataclass(cls, saved[key]) for cls, key in _CONFIGS)
        if not 0.0 <= ctc_weight <= 1.0 or not 0.0 <= (ctc_weight if ctc_weight_final is None else ctc_weight_final) <= 1.0:
            raise ValueError(f"ctc weights must be in [0, 1], got {ctc_weight} and {ctc_weight_final}")
        if not 0.0 <= consistency_weight <= 10.0:
            raise ValueError(f"consistency_weight must be in [0, 10], got {consistency_weight}")
        if ctc_weight > 0 and not las.ctc_upsample:
            raise ValueError("ctc_weight > 0 needs a CTC head: set las.ctc_upsample >= 1")
        # Plain data only, so checkpoints load with weights_only=True.
        optimizer = as_dataclass(OptimizerConfig, optimizer)
        self.save_hyperparameters(ignore=["vocabulary", "las", "features", "decoding", "optimizer"])
        self.hparams.update(
            vocabulary=list(vocabulary),
            las=asdict(las),
            features=asdict(features),
            decoding=asdict(decoding),
            optimizer=asdict(optimizer),
        )
        self.optimizer_config = optimizer
        self.model = build_recognizer(dict(self.hparams))  # with its vocabulary and decoding settings
        if pretrained_encoder is not None:
            if not self.model.pretrained:
                raise ValueError(f"model.pretrained_encoder {pretrained_encoder} needs model.las.listener: pretrained")
            self.model.listener.encoder.load_state_dict(load_whisper_encoder(pretrained_encoder, las.encoder))
        elif self.model.pretrained:
            rank_zero_warn(
                "model.las.listener is pretrained but model.pretrained_encoder is not set: the encoder's weights "
                "must come from a checkpoint (--ckpt_path, --init_from)"
            )
        self._total_steps: int | None = None  # set when fit configures the optimiser
        self._last_step_time: float | None = None

    @property
    def vocabulary(self) -> Vocabulary:
        """The model's characters."""
        return self.model.vocabulary

    @property
    def decoding(self) -> DecodeConfig:
        """The model's decoding settings (validation and test search with them)."""
        return self.model.decoding

    # ------------------------------------------------------------------ what training sets once

    def set_feature_statistics(self, batches) -> None:
        """Normalise features with the statistics of ``(waveforms, lengths)`` batches of training
        audio, unless the model has them already (a resumed run; a model whose colour shrink is new
        gets its training colour and keeps its norm)."""
        if self.model.frontend.needs_statistics:
            start = time.time()
            frames = self.model.frontend.accumulate_statistics(batches)
            rank_zero_info(f"feature statistics from {frames} frames of training audio in {time.time() - start:.1f} s")

    def set_longest_utterance(self, seconds: float) -> None:
        """``transcribe`` cuts longer audio into pieces no longer than what training showed the model."""
        if self.decoding.max_chunk_seconds is None:
            self.model.decoding = replace(self.decoding, max_chunk_seconds=round(seconds, 2))
            self.hparams["decoding"] = asdict(self.decoding)

    def configure_optimizers(self):
        opt = self.optimizer_config
        self._total_steps = max(1, int(self.trainer.estimated_stepping_batches))
        return with_schedule(
            torch.optim.AdamW(self.parameters(), lr=opt.lr, weight_decay=opt.weight_decay), opt, self._total_steps
        )

    # ------------------------------------------------------------------ loss

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        parameters = [name for name, _ in self.named_parameters()]
        optimizer_states_from_lstm_cells(checkpoint, parameters)  # runs saved before the shared LSTM step resume too
        training_colour_from_model(checkpoint, self.model.frontend.colour)  # weights saved without a colour shrink start one

    def _progress(self) -> float:
        """Fraction of training done; 1 outside ``fit`` (validate/test use the final weights)."""
        total = self._total_steps
        return min(1.0, self.global_step / total) if total else 1.0

    def ctc_weight(self) -> float:
        start, final = self.hparams.ctc_weight, self.hparams.ctc_weight_final
        return start if final is None else start + (final - start) * self._progress()

    def sampling_probability(self) -> float:
        """Scheduled sampling's probability at this step: 0, then a linear ramp to ``scheduled_sampling``."""
        start = self.hparams.scheduled_sampling_start
        if not self.training or self.hparams.scheduled_sampling <= 0 or self.global_step < start:
            return 0.0
        return self.hparams.scheduled_sampling * min(1.0, (self.global_step - start) / max(1, start))

    def guided_attention_weight(self) -> float:
        weight, steps = self.hparams.guided_attention, self.hparams.guided_attention_steps
        if weight <= 0 or steps is None:
            return weight
        return weight * max(0.0, 1.0 - self.global_step / max(1, steps))

    def _guided_attention_loss(
        self, alignments: torch.Tensor, output_lengths: torch.Tensor, encoder_lengths: torch.Tensor
    ) -> torch.Tensor:
        """Mean over output steps of ``sum_l alpha_ul * (1 - exp(-(l/L - u/U)^2 / 2g^2))`` (Tachibana et al. 2017)."""
        batch, steps, frames = alignments.shape
        u = torch.arange(steps, device=alignments.device)[None, :, None] / output_lengths[:, None, None]  # (B, U, 1)
        frame = torch.arange(frames, device=alignments.device)[None, None, :] / encoder_lengths[:, None, None]  # (B, 1, L)
        penalty = 1 - torch.exp(-((frame - u) ** 2) / (2 * self.hparams.guided_attention_sigma**2))  # (B, U, L)
        valid = torch.arange(steps, device=alignments.device)[None, :] < output_lengths[:, None]  # (B, U)
        per_step = (alignments.float() * penalty).sum(-1)  # (B, U)
        return per_step[valid].mean()

    def _consistency_loss(self, batch: Batch, states: torch.Tensor, encoder_lengths: torch.Tensor) -> torch.Tensor | None:
        """``mean_t ||h_t - sg(r_t)||^2 / ||sg(r_t)||^2`` over the valid frames of the utterances whose
        training audio differs from its reference; ``None`` where none does.

        Args:
            batch (Batch): a training batch with ``references`` `(B, N)`.
            states (torch.Tensor): the listener's states of ``batch.waveforms`` `(B, L, D)`.
            encoder_lengths (torch.Tensor): `(B,)`.
        """
        differs = (batch.references != batch.waveforms).any(1)  # (B,)
        if not bool(differs.any()):
            return None
        training = self.model.training
        self.model.eval()  # the reference's states without dropout (or SpecAugment's masks)
        try:
            with torch.no_grad():
                reference, _ = self.model.encode(batch.references[differs], batch.lengths[differs])  # (B', L', D)
        finally:
            self.model.train(training)
        heard = states[differs][:, : reference.size(1)].float()  # L' covers every frame of these utterances
        reference = reference.float()
        distance = (heard - reference).square().sum(-1) / reference.square().sum(-1).clamp_min(1e-6)  # (B', L')
        return distance[lengths_to_mask(encoder_lengths[differs], reference.size(1))].mean()

    def _loss(self, batch: Batch, per_item: bool = False) -> dict[str, torch.Tensor]:
        """The loss of a batch and its terms; with ``per_item``, also ``item_loss`` `(B,)`: each
        utterance's loss, its tokens' mean cross-entropy and its CTC loss per label."""
        inputs, outputs, label_lengths = batch.inputs, batch.outputs, batch.label_lengths  # ids from the data's collate
        if inputs is None:
            raise ValueError("the batch has no speller ids; expected one from speech_attend.data.dataset.Collate(vocabulary)")
        out = self.model(batch.waveforms, batch.lengths, inputs, self.sampling_probability(), cached=batch.cached)
        logits = out["logits"].float().transpose(1, 2)  # (B, V, U)
        smoothing, pad = self.hparams.label_smoothing, self.vocabulary.pad_id
        attention_loss = F.cross_entropy(logits, outputs, ignore_index=pad, label_smoothing=smoothing)
        losses = {"attention_loss": attention_loss}
        if per_item:
            token_losses = F.cross_entropy(logits, outputs, ignore_index=pad, label_smoothing=smoothing, reduction="none")
            losses["item_loss"] = token_losses.sum(1) / (outputs != pad).sum(1)  # (B,)
        guided = self.guided_attention_weight() if self.training else 0.0
        if guided > 0:
            losses["guided_attention_loss"] = self._guided_attention_loss(
                out["alignments"], label_lengths + 1, out["encoder_lengths"]
            )
        weight = self.ctc_weight()
        if weight > 0:
            labels = outputs.masked_fill(outputs == self.vocabulary.eos_id, self.vocabulary.pad_id)
            ctc = {
                "log_probs": out["ctc_log_probs"].transpose(0, 1),
                "targets": labels,
                "input_lengths": out["ctc_lengths"],
                "target_lengths": label_lengths,
                "blank": LAS.blank_id,
                "zero_infinity": True,
            }
            # per label, like the CE; an empty transcript (a sound without speech) counts as one label
            item_ctc = F.ctc_loss(**ctc, reduction="none") / label_lengths.clamp_min(1)  # (B,)
            ctc_loss = item_ctc.mean()
            losses["ctc_loss"] = ctc_loss
            losses["loss"] = (1 - weight) * attention_loss + weight * ctc_loss
            if per_item:
                losses["item_loss"] = (1 - weight) * losses["item_loss"] + weight * item_ctc
        else:
            losses["loss"] = attention_loss
        if guided > 0:
            losses["loss"] = losses["loss"] + guided * losses["guided_attention_loss"]
        consistency = self.hparams.consistency_weight
        if self.training and consistency > 0:
            if batch.cached is not None:
                raise ValueError(
                    "model.consistency_weight needs the training audio; cached encoder states (data.feature_cache) have none"
                )
            if batch.references is None:
                raise ValueError(
                    f"model.consistency_weight {consistency:g} needs training batches with references: set "
                    "data.references true and data.augment (the command line links them)"
                )
            term = self._consistency_loss(batch, out["states"], out["encoder_lengths"])
            if term is not None:
                losses["consistency_loss"] = term
                losses["loss"] = losses["loss"] + consistency * term
        return losses

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        if not batch.batch_size:  # every file of the batch was unreadable (logged by SkipBadSamples)
            return zero_loss(self)
        losses = self._loss(batch)
        size = len(batch.texts)
        self.log("train/loss", losses["loss"], prog_bar=True, batch_size=size)
        self.log("train/attention_loss", losses["attention_loss"], batch_size=size)
        for name in ("ctc_loss", "guided_attention_loss", "consistency_loss"):
            if name in losses:
                self.log(f"train/{name}", losses[name], batch_size=size)
        now = time.perf_counter()
        if self._last_step_time is not None:  # wall time of a whole step: data, forward, backward, update
            self.log("train/seconds_per_step", now - self._last_step_time, batch_size=size)
        self._last_step_time = now
        self.log("train/ctc_weight", self.ctc_weight(), batch_size=size)
        self.log("train/scheduled_sampling", self.sampling_probability(), batch_size=size)
        return losses["loss"]

    # ------------------------------------------------------------------ evaluation

    def transcribe_batch(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        beam_size: int | None = None,
        cached: tuple[torch.Tensor, torch.Tensor] | None = None,
    ):
        """Texts and hypotheses (with attention) for a batch of waveforms (or of cached encoder states)."""
        hyps, encoder_lengths = self.model.decode(waveforms, lengths, self.decoding, beam_size, cached=cached)
        return ["".join(self.vocabulary.decode(h.tokens)) for h in hyps], hyps, encoder_lengths

    def _evaluation_step(self, batch: Batch, stage: str) -> None:
        if not batch.batch_size:
            return
        losses = self._loss(batch, per_item=True)
        beam = self.decoding.val_beam_size if stage == "val" else self.decoding.beam_size
        texts, _, _ = self.transcribe_batch(batch.waveforms, batch.lengths, beam, cached=batch.cached)
        records = [
            {"key": key, "loss": loss, "reference": reference, "text": text}
            for key, loss, reference, text in zip(batch.keys, losses["item_loss"].tolist(), batch.texts, texts)
        ]
        self.add_evaluation(stage, records, losses["loss"])

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluation_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluation_step(batch, "test")

    def evaluation_metrics(self, records: list[dict]) -> dict[str, float | None]:
        return speech_metrics([r["reference"] for r in records], [r["text"] for r in records])

    def output_line(self, record: dict) -> dict:
        return {"utterance": record["key"], "reference": record["reference"], "text": record["text"]}

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        self._last_step_time = None  # the next step's time would include validation
