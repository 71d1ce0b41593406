"""The captioner as a LightningModule: encoder + decoder, the loss, and beam-search evaluation.

Loss (Xu et al. 2015, eq. 14), per caption, averaged over the batch::

    L = -log p(y | a) + lambda * sum_i (1 - sum_t alpha_ti)^2

the second term (doubly stochastic attention) counting real steps only, never padding. Hard
attention replaces ``-log p(y | a)`` by the REINFORCE surrogate of :func:`shared.reinforce_loss`
on the minibatches that sample (probability ``1 - semi_sampling``); the others use the expected
context and the plain likelihood.

Validation and test decode with the batched beam search, never with teacher forcing, and score
the captions with the COCO caption metrics (plus exact match and pointing accuracy on the shapes
data). ``test`` writes them to ``test_metrics.json`` (and the captions to ``test_captions.jsonl``)
in ``trainer.default_root_dir``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from shared import Hypothesis, MovingAverageBaseline, ReinforceConfig, Vocabulary, attention_entropy, beam_search
from shared import lengths_to_mask, reinforce_loss
from shared.metrics import caption_metrics, exact_match
from shared.robust import zero_loss

from .decoder import Decoder, DecoderConfig
from .encoder import Encoder, EncoderConfig
from .pointing import pointing_hits

__all__ = ["Captioner", "OptimizerConfig", "doubly_stochastic_penalty", "caption_loss"]


@dataclass
class OptimizerConfig:
    lr: float = 4e-4  # Adam learning rate (decoder, and a small encoder trained from scratch)
    encoder_lr: float = 1e-4  # learning rate of fine-tuned pretrained encoder blocks
    weight_decay: float = 0.0
    warmup_steps: int = 0  # linear warm-up from 0
    schedule: str = "constant"  # "constant" or "cosine" (decays to final_lr_fraction * lr at the last step)
    final_lr_fraction: float = 0.05


def _config(cls: type, value: Any) -> Any:
    """A dataclass config from an instance, a plain dict (as stored in checkpoints) or None."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        unknown = set(value) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}")
        return cls(**value)
    raise ValueError(f"expected a {cls.__name__} or a dict, got {type(value).__name__}")


def doubly_stochastic_penalty(alphas: torch.Tensor, step_mask: torch.Tensor) -> torch.Tensor:
    """``sum_i (1 - sum_t alpha_ti)^2`` per caption (eq. 14), padded steps excluded.

    Args:
        alphas (torch.Tensor): attention weights `(B, T, L)`.
        step_mask (torch.Tensor): bool `(B, T)`, ``True`` at real steps.

    Returns:
        torch.Tensor: `(B,)`.
    """
    attention_per_location = (alphas * step_mask.unsqueeze(-1).to(alphas.dtype)).sum(1)  # (B, L)
    return ((1.0 - attention_per_location) ** 2).sum(-1)


def caption_loss(logits: torch.Tensor, targets: torch.Tensor, step_mask: torch.Tensor) -> torch.Tensor:
    """``-log p(y | a)`` of each caption `(B,)`: token cross-entropies summed over real steps."""
    nll = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # (B, T)
    return (nll * step_mask).sum(1)


class Captioner(pl.LightningModule):
    """Show, Attend and Tell.

    Args:
        vocabulary (list of str): the words (specials excluded), linked from the data module.
        encoder (EncoderConfig): backbone, weights, grid, fine-tuning.
        decoder (DecoderConfig): sizes, gate, soft or hard attention, dropout.
        doubly_stochastic (float): lambda of eq. 14; 0 turns the term off. (Default: ``1.0``)
        reinforce (ReinforceConfig): hard attention's baseline, entropy, REINFORCE weights and
            semi-sampling.
        optimizer (OptimizerConfig): Adam and the learning-rate schedule.
        image_size (int): input side in pixels, linked from the data module (used by ``caption``).
        beam_size (int): beams at validation and test. (Default: ``5``)
        max_decode_length (int): most words a decoded caption may have. (Default: ``50``)
        length_penalty (float): alpha of the beam search's length normalisation. (Default: ``0``)
        meteor (bool): also compute METEOR (needs Java and the METEOR jar). (Default: ``False``)
    """

    def __init__(
        self,
        vocabulary: list[str] | None = None,
        encoder: EncoderConfig | None = None,
        decoder: DecoderConfig | None = None,
        doubly_stochastic: float = 1.0,
        reinforce: ReinforceConfig | None = None,
        optimizer: OptimizerConfig | None = None,
        image_size: int = 224,
        beam_size: int = 5,
        max_decode_length: int = 50,
        length_penalty: float = 0.0,
        meteor: bool = False,
    ):
        super().__init__()
        if not vocabulary:
            raise ValueError("the captioner needs a vocabulary (a list of words), normally linked from the data module")
        encoder, decoder = _config(EncoderConfig, encoder), _config(DecoderConfig, decoder)
        reinforce, optimizer = _config(ReinforceConfig, reinforce), _config(OptimizerConfig, optimizer)
        if beam_size < 1 or max_decode_length < 1:
            raise ValueError(f"beam_size and max_decode_length must be >= 1, got {beam_size} and {max_decode_length}")
        # Plain data only, so a checkpoint loads with torch.load(weights_only=True).
        self.save_hyperparameters(
            {
                "vocabulary": list(vocabulary),
                "encoder": asdict(encoder),
                "decoder": asdict(decoder),
                "doubly_stochastic": float(doubly_stochastic),
                "reinforce": asdict(reinforce),
                "optimizer": asdict(optimizer),
                "image_size": int(image_size),
                "beam_size": int(beam_size),
                "max_decode_length": int(max_decode_length),
                "length_penalty": float(length_penalty),
                "meteor": bool(meteor),
            }
        )
        self.vocab = Vocabulary(vocabulary)
        self.reinforce_config, self.optimizer_config = reinforce, optimizer
        self.encoder = Encoder(encoder)
        self.decoder = Decoder(decoder, len(self.vocab), self.encoder.feature_dim)
        self.baseline = MovingAverageBaseline(reinforce.baseline_decay)
        self._outputs: list[dict] = []

    @property
    def hard(self) -> bool:
        return self.decoder.config.attention == "hard"

    # ------------------------------------------------------------------ model

    def encode(self, batch: dict) -> torch.Tensor:
        """Annotation vectors `(B, L, D)`: cached features, or the encoder run on the images."""
        return batch["features"] if "features" in batch else self.encoder(batch["images"])

    def forward(self, batch: dict, sample: bool = False, features: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Teacher-forced loss terms of a batch.

        Args:
            batch (dict): from :func:`show_attend.data.collate`.
            sample (bool): hard attention: read sampled locations instead of the expected context.
            features (torch.Tensor or None): the batch's annotation vectors, if already computed.

        Returns:
            dict: ``nll`` `(B,)` (``-log p(y|a)`` per caption), ``penalty`` `(B,)` (doubly
            stochastic term), ``alphas`` `(B, T, L)`, ``step_mask`` `(B, T)`, ``tokens`` (count
            of real target tokens) and, when sampling, ``sample_log_probs`` `(B, T)`.
        """
        captions, lengths = batch["captions"], batch["lengths"]
        inputs, targets = captions[:, :-1], captions[:, 1:]  # (B, T) each
        features = self.encode(batch) if features is None else features
        out = self.decoder(features, inputs, sample=sample)
        step_mask = lengths_to_mask(lengths, targets.size(1))  # (B, T)
        return {
            "nll": caption_loss(out.logits, targets, step_mask),
            "penalty": doubly_stochastic_penalty(out.alphas.float(), step_mask),
            "alphas": out.alphas,
            "step_mask": step_mask,
            "tokens": lengths.sum(),
            "sample_log_probs": out.sample_log_probs,
        }

    def loss(
        self, batch: dict, sample: bool = False, features: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training objective of a batch, and the terms to log."""
        terms = self(batch, sample=sample, features=features)
        if sample:  # hard attention with sampled locations: REINFORCE (reward = log p(y | s))
            log_likelihood = -terms["nll"]
            baseline = self.baseline.update(log_likelihood)
            entropy = attention_entropy(terms["alphas"].float())  # (B, T)
            task = reinforce_loss(log_likelihood, terms["sample_log_probs"].float(), entropy, terms["step_mask"], baseline, self.reinforce_config)
        else:
            task = terms["nll"].mean()
        loss = task + self.hparams.doubly_stochastic * terms["penalty"].mean()
        logs = {"loss": loss, "token_nll": terms["nll"].sum() / terms["tokens"], "attention_penalty": terms["penalty"].mean()}
        return loss, logs

    @torch.no_grad()
    def generate(self, features: torch.Tensor, beam_size: int | None = None, max_length: int | None = None) -> list[Hypothesis]:
        """Best caption of each image by batched beam search (expected context for both models).

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.
            beam_size (int or None): beams; the model's ``beam_size`` when ``None``.
            max_length (int or None): most words; the model's ``max_decode_length`` when ``None``.

        Returns:
            list of Hypothesis: one per image, at most ``max_length`` words; ``attention`` is
            `(len(tokens), L)`.
        """
        beam_size = beam_size or self.hparams.beam_size
        max_length = max_length or self.hparams.max_decode_length
        memory, state = self.decoder.start(features)  # one memory row serves the K beams of an image
        results = beam_search(
            self._step_ending_after(max_length), state, features.size(0), beam_size, self.vocab.sos_id,
            self.vocab.eos_id, max_length + 1, length_penalty=self.hparams.length_penalty, memory=memory,
        )  # max_length words, then a step that can only end the caption
        return [hyps[0] for hyps in results]

    def _step_ending_after(self, max_length: int):
        """The decoder's step, allowing only ``<eos>`` after ``max_length`` words.

        The beam search returns a hypothesis that has not ended after its last step as it is, all
        its tokens words: ``max_length + 1`` steps would give a caption that never ends one word
        too many. Ending it there instead keeps the ``<eos>`` probability in its score. The beam
        search advances every hypothesis by one word per call, so counting calls counts words.
        """
        steps = 0

        def step(tokens: torch.Tensor, state, memory):
            nonlocal steps
            log_probs, state, attention = self.decoder.step(tokens, state, memory)  # (N, V)
            steps += 1
            if steps > max_length:  # every hypothesis holds max_length words
                others = torch.arange(log_probs.size(1), device=log_probs.device) != self.vocab.eos_id  # (V,)
                log_probs = log_probs.masked_fill(others, float("-inf"))
            return log_probs, state, attention

        return step

    # ------------------------------------------------------------------ training

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if not batch["batch_size"]:  # every image of the batch was unreadable (logged by SkipBadSamples)
            return zero_loss(self)
        sample = self.hard and bool(torch.rand(()) >= self.reinforce_config.semi_sampling)  # once per minibatch
        loss, logs = self.loss(batch, sample=sample)
        batch_size = batch["batch_size"]
        self.log("train_loss", loss, prog_bar=True, batch_size=batch_size)
        self.log("train_token_nll", logs["token_nll"], batch_size=batch_size)
        self.log("train_attention_penalty", logs["attention_penalty"], batch_size=batch_size)
        return loss

    def configure_optimizers(self) -> dict:
        opt = self.optimizer_config
        decoder_params = [p for name, p in self.named_parameters() if not name.startswith("encoder.") and p.requires_grad]
        encoder_params = [p for p in self.encoder.parameters() if p.requires_grad]
        encoder_lr = opt.lr if self.encoder.config.backbone == "small" else opt.encoder_lr
        groups = [{"params": decoder_params, "lr": opt.lr}]
        if encoder_params:
            groups.append({"params": encoder_params, "lr": encoder_lr})
        optimizer = torch.optim.Adam(groups, weight_decay=opt.weight_decay)
        if opt.schedule not in ("constant", "cosine"):
            raise ValueError(f"unknown learning-rate schedule {opt.schedule!r}; expected constant or cosine")
        total = max(1, int(self.trainer.estimated_stepping_batches)) if self._trainer is not None else 1

        def factor(step: int) -> float:
            if step < opt.warmup_steps:
                return (step + 1) / opt.warmup_steps
            if opt.schedule == "constant":
                return 1.0
            progress = min(1.0, (step - opt.warmup_steps) / max(1, total - opt.warmup_steps))
            return opt.final_lr_fraction + (1 - opt.final_lr_fraction) * 0.5 * (1 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ------------------------------------------------------------------ evaluation

    def _evaluation_step(self, batch: dict, stage: str) -> None:
        if not batch["batch_size"]:
            return
        features = self.encode(batch)
        loss, logs = self.loss(batch, features=features)  # teacher-forced loss, logged for reference only
        batch_size = batch["batch_size"]
        self.log(f"{stage}_loss", loss, batch_size=batch_size, sync_dist=True)
        self.log(f"{stage}_token_nll", logs["token_nll"], batch_size=batch_size, sync_dist=True)
        grid = self.encoder.grid
        for i, hyp in enumerate(self.generate(features)):  # the metrics see decoded captions only
            tokens = self.vocab.decode(hyp.tokens)
            self._outputs.append(
                {
                    "key": batch["keys"][i],
                    "caption": " ".join(tokens),
                    "tokens": tokens,
                    "references": batch["references"][i],
                    "objects": batch["objects"][i],
                    "size": batch["sizes"][i],
                    "attention": hyp.attention.view(-1, *grid).cpu() if hyp.attention is not None else None,
                }
            )

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._evaluation_step(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._evaluation_step(batch, "test")

    def on_validation_epoch_start(self) -> None:
        self._outputs = []

    def on_test_epoch_start(self) -> None:
        self._outputs = []

    def _gathered_outputs(self) -> list[dict]:
        """This process's captions, or every process's under DDP (duplicates from padding dropped)."""
        outputs = self._outputs
        if self.trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            everyone: list = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(everyone, outputs)
            outputs = [o for part in everyone for o in part]
        unique = {o["key"]: o for o in outputs}
        return list(unique.values())

    def evaluation_metrics(self, outputs: list[dict]) -> dict[str, float | None]:
        """Caption metrics of decoded captions (see the module docstring)."""
        hyps = {o["key"]: o["caption"] for o in outputs}
        refs = {o["key"]: o["references"] for o in outputs}
        metrics = caption_metrics(hyps, refs, meteor=self.hparams.meteor)
        metrics["exact_match"] = exact_match(hyps, refs)
        with_objects = [o for o in outputs if o["objects"] and o["attention"] is not None and o["size"]]
        if with_objects:
            counts = [pointing_hits(o["tokens"], o["attention"], o["objects"], o["size"]) for o in with_objects]
            words = sum(total for _, total in counts)
            metrics["pointing_accuracy"] = sum(hits for hits, _ in counts) / words if words else 0.0
        return metrics

    def _evaluation_epoch_end(self, stage: str) -> dict[str, float | None]:
        outputs = self._gathered_outputs()
        self._outputs = []
        if not outputs:
            return {}
        metrics = self.evaluation_metrics(outputs)
        for name, value in metrics.items():
            if value is not None:
                # Every process holds the same (gathered) value; sync_dist only keeps DDP quiet.
                self.log(f"{stage}_{name}", float(value), prog_bar=name in ("bleu4", "cider", "exact_match"), sync_dist=True)
        if stage == "test" and self.trainer.is_global_zero:
            self._write_test_results(metrics, outputs)
        return metrics

    def _write_test_results(self, metrics: dict, outputs: list[dict]) -> None:
        run_dir = Path(self.trainer.default_root_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        results = {**metrics, "images": len(outputs), "beam_size": self.hparams.beam_size}
        (run_dir / "test_metrics.json").write_text(json.dumps(results, indent=2) + "\n")
        with (run_dir / "test_captions.jsonl").open("w") as f:
            for o in sorted(outputs, key=lambda o: o["key"]):
                f.write(json.dumps({"image": o["key"], "caption": o["caption"], "references": o["references"]}) + "\n")
        print(f"test metrics written to {run_dir / 'test_metrics.json'}")

    def on_validation_epoch_end(self) -> None:
        self._evaluation_epoch_end("val")

    def on_test_epoch_end(self) -> None:
        self._evaluation_epoch_end("test")

    # ------------------------------------------------------------------ feature cache

    def setup(self, stage: str) -> None:
        """Use the data module's feature cache when the encoder is frozen (features never change)."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is None or not getattr(datamodule, "feature_cache", None):
            return
        if not self.encoder.frozen:
            raise ValueError("data.feature_cache needs a frozen encoder (model.encoder.fine_tune_blocks: 0, not the small CNN)")
        device = self.trainer.strategy.root_device
        self.encoder.to(device).eval()
        try:
            datamodule.attach_feature_cache(self.encoder, self.encoder.cache_key(), device, self.trainer.is_global_zero)
            self.trainer.strategy.barrier("feature_cache")
            datamodule.attach_feature_cache(self.encoder, self.encoder.cache_key(), device, False)
        finally:
            self.encoder.to("cpu")
