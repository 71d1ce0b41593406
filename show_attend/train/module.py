"""The captioner's LightningModule: the loss, hard attention's REINFORCE, the optimiser, and
beam-search evaluation.

Loss (Xu et al. 2015, eq. 14), per caption, averaged over the batch::

    L = -log p(y | a) + lambda * sum_i (1 - sum_t alpha_ti)^2

the second term (doubly stochastic attention) counting real steps only, never padding. Hard
attention replaces ``-log p(y | a)`` by the REINFORCE surrogate of :func:`shared.reinforce_loss`
on the minibatches that sample (probability ``1 - semi_sampling``); the others use the expected
context and the plain likelihood.

Validation and test decode with the batched beam search, never with teacher forcing, and score
the captions with the COCO caption metrics (plus exact match and pointing accuracy on the shapes
data), over the whole split (:class:`shared.training.module.AttendModule`).

With a frozen encoder that has pretrained weights, checkpoints leave those weights out and keep
their fingerprint (see :mod:`show_attend.model.encoder`); they are restored from the same weights file.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch

from shared import MovingAverageBaseline, ReinforceConfig, Vocabulary, attention_entropy, lengths_to_mask, reinforce_loss
from shared.io.config import as_dataclass
from shared.io.model_files import OMITTED_KEY
from shared.reinforce import use_expected_context
from shared.training.guards import zero_loss
from shared.training.module import AttendModule
from shared.training.schedule import OptimizerConfig, with_schedule
from show_attend.evaluate.metrics import caption_metrics, exact_match
from show_attend.model.captioner import CaptionerConfig, DecodeConfig, build_captioner
from show_attend.model.decoder import DecoderConfig
from show_attend.model.encoder import EncoderConfig, restore_omitted_weights
from show_attend.model.migrations import migrate_hyper_parameters
from show_attend.train.pointing import pointing_hits

__all__ = ["CaptionerModule", "doubly_stochastic_penalty"]


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


class CaptionerModule(AttendModule):
    """Show, Attend and Tell, trained and evaluated.

    Args:
        vocabulary (list of str): the words (specials excluded), linked from the data module.
        encoder (EncoderConfig): backbone, weights, grid, fine-tuning.
        decoder (DecoderConfig): sizes, gate, soft or hard attention, dropout.
        doubly_stochastic (float): lambda of eq. 14; 0 turns the term off. (Default: ``1.0``)
        reinforce (ReinforceConfig): hard attention's baseline, entropy, REINFORCE weights and
            semi-sampling.
        optimizer (OptimizerConfig): Adam and the learning-rate schedule. (Default: ``lr`` 4e-4,
            constant)
        encoder_lr (float): learning rate of fine-tuned pretrained encoder blocks (a small
            encoder trained from scratch uses ``optimizer.lr``). (Default: ``1e-4``)
        image_size (int): input side in pixels, linked from the data module (used by ``caption``).
        decoding (DecodeConfig): the beam search of validation, test and ``caption``: beams, most
            words, length penalty, the stop for a repeated word. (Default: ``DecodeConfig()``)
        meteor (bool): also compute METEOR (needs Java and the METEOR jar). (Default: ``False``)
    """

    app = "show-attend"
    output_field, output_noun = "caption", "captions"  # what the collapse measures read and name
    migrate_hyper_parameters = staticmethod(migrate_hyper_parameters)  # an older checkpoint's, for --ckpt_path

    def __init__(
        self,
        vocabulary: list[str] | None = None,
        encoder: EncoderConfig | None = None,
        decoder: DecoderConfig | None = None,
        doubly_stochastic: float = 1.0,
        reinforce: ReinforceConfig | None = None,
        optimizer: OptimizerConfig = OptimizerConfig(lr=4e-4),  # frozen: a shared default cannot be changed
        encoder_lr: float = 1e-4,
        image_size: int = 224,
        decoding: DecodeConfig = DecodeConfig(),
        meteor: bool = False,
    ):
        super().__init__()
        if not vocabulary:
            raise ValueError("the captioner needs a vocabulary (a list of words), normally linked from the data module")
        config = CaptionerConfig(encoder, decoder, image_size)
        reinforce, optimizer = as_dataclass(ReinforceConfig, reinforce), as_dataclass(OptimizerConfig, optimizer)
        # Plain data only, so a checkpoint loads with torch.load(weights_only=True).
        self.save_hyperparameters(
            {
                "vocabulary": list(vocabulary),
                **config.to_dict(),
                "decoding": asdict(as_dataclass(DecodeConfig, decoding)),
                "doubly_stochastic": float(doubly_stochastic),
                "reinforce": asdict(reinforce),
                "optimizer": asdict(optimizer),
                "encoder_lr": float(encoder_lr),
                "meteor": bool(meteor),
            }
        )
        self.reinforce_config, self.optimizer_config = reinforce, optimizer
        self.model = build_captioner(dict(self.hparams))  # with its vocabulary and decoding settings
        self.baseline = MovingAverageBaseline(reinforce.baseline_decay)

    @property
    def vocabulary(self) -> Vocabulary:
        """The model's words."""
        return self.model.vocabulary

    @property
    def decoding(self) -> DecodeConfig:
        """The model's decoding settings (validation and test search with them)."""
        return self.model.decoding

    @property
    def hard(self) -> bool:
        return self.model.decoder.config.attention == "hard"

    # ------------------------------------------------------------------ loss

    def _features(self, batch: dict) -> torch.Tensor:
        """Annotation vectors `(B, L, D)`: cached features, or the encoder run on the images."""
        return batch["features"] if "features" in batch else self.model.encode(batch["images"])

    def loss(
        self, batch: dict, sample: bool = False, features: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training objective of a batch, and the terms to log.

        Args:
            batch (dict): from :func:`show_attend.data.dataset.collate`.
            sample (bool): hard attention: read sampled locations, and train them with REINFORCE.
            features (torch.Tensor or None): the batch's annotation vectors, if already computed.
        """
        captions, lengths = batch["captions"], batch["lengths"]  # <sos> y_1 .. y_T, (B, T + 1)
        features = self._features(batch) if features is None else features
        out = self.model.score(features, captions, lengths, sample)  # only the real steps run
        step_mask = lengths_to_mask(lengths, captions.size(1) - 1)  # (B, T)
        nll = -out.log_probs.sum(1)  # (B,): -log p(y | a), 0 at padded steps
        penalty = doubly_stochastic_penalty(out.alphas.float(), step_mask)  # (B,)
        if sample:  # hard attention with sampled locations: REINFORCE (reward = log p(y | s))
            baseline = self.baseline.update(-nll)
            entropy = attention_entropy(out.alphas.float())  # (B, T)
            task = reinforce_loss(-nll, out.sample_log_probs.float(), entropy, step_mask, baseline, self.reinforce_config)
        else:
            task = nll.mean()
        loss = task + self.hparams.doubly_stochastic * penalty.mean()
        item_loss = (nll + self.hparams.doubly_stochastic * penalty).detach()  # (B,): the loss of each caption
        return loss, {
            "loss": loss,
            "token_nll": nll.sum() / lengths.sum(),
            "attention_penalty": penalty.mean(),
            "item_loss": item_loss,
        }

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if not batch["batch_size"]:  # every image of the batch was unreadable (logged by SkipBadSamples)
            return zero_loss(self)
        sample = self.hard and not use_expected_context(self.reinforce_config)  # drawn once per minibatch
        loss, logs = self.loss(batch, sample=sample)
        size = batch["batch_size"]
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        self.log("train/token_nll", logs["token_nll"], batch_size=size)
        self.log("train/attention_penalty", logs["attention_penalty"], batch_size=size)
        return loss

    def configure_optimizers(self) -> dict:
        opt = self.optimizer_config
        decoder_params = [p for name, p in self.named_parameters() if not name.startswith("model.encoder.") and p.requires_grad]
        encoder_params = [p for p in self.model.encoder.parameters() if p.requires_grad]
        encoder_lr = opt.lr if self.model.encoder.config.backbone == "small" else self.hparams.encoder_lr
        groups = [{"params": decoder_params, "lr": opt.lr}]
        if encoder_params:
            groups.append({"params": encoder_params, "lr": encoder_lr})
        total = int(self.trainer.estimated_stepping_batches) if self._trainer is not None else 1
        return with_schedule(torch.optim.Adam(groups, weight_decay=opt.weight_decay), opt, total)

    # ------------------------------------------------------------------ evaluation

    def _evaluation_step(self, batch: dict, stage: str) -> None:
        if not batch["batch_size"]:
            return
        features = self._features(batch)
        loss, logs = self.loss(batch, features=features)  # teacher-forced, logged for reference only
        self.log(f"{stage}/token_nll", logs["token_nll"], batch_size=batch["batch_size"], sync_dist=True)
        records = []
        item_losses = logs["item_loss"].tolist()
        for i, hyp in enumerate(self.model.search(features)):  # the metrics see decoded captions only
            tokens = self.model.vocabulary.decode(hyp.tokens)
            records.append(
                {
                    "key": batch["keys"][i],
                    "loss": item_losses[i],
                    "caption": " ".join(tokens),
                    "tokens": tokens,
                    "references": batch["references"][i],
                    "objects": batch["objects"][i],
                    "size": batch["sizes"][i],
                    "attention": None
                    if self.model.decoder.config.attention == "none" or hyp.attention is None
                    else hyp.attention.view(-1, *self.model.grid).cpu(),  # no pointing for the fixed-vector decoder
                }
            )
        self.add_evaluation(stage, records, loss)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._evaluation_step(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._evaluation_step(batch, "test")

    def evaluation_metrics(self, records: list[dict]) -> dict[str, float | None]:
        hyps = {r["key"]: r["caption"] for r in records}
        refs = {r["key"]: r["references"] for r in records}
        metrics = caption_metrics(hyps, refs, meteor=self.hparams.meteor)
        metrics["exact_match"] = exact_match(hyps, refs)
        with_objects = [r for r in records if r["objects"] and r["attention"] is not None and r["size"]]
        if with_objects:
            counts = [pointing_hits(r["tokens"], r["attention"], r["objects"], r["size"]) for r in with_objects]
            words = sum(total for _, total in counts)
            metrics["pointing_accuracy"] = sum(hits for hits, _ in counts) / words if words else 0.0
        return metrics

    def output_line(self, record: dict) -> dict:
        return {"image": record["key"], "caption": record["caption"], "references": record["references"]}

    # ------------------------------------------------------------------ checkpoints

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        omitted = self.model.encoder.pretrained_frozen_keys(prefix="encoder.")  # the model's keys
        if omitted:  # restorable from the published weights file: no copy of it in every checkpoint
            for key in omitted:
                checkpoint["state_dict"].pop(f"model.{key}", None)
            checkpoint[OMITTED_KEY] = {"keys": omitted, "fingerprint": self.model.encoder.pretrained_frozen_fingerprint()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        omitted = checkpoint.get(OMITTED_KEY)
        if omitted:
            restore_omitted_weights(checkpoint["state_dict"], omitted, self.model.encoder, "--ckpt_path", prefix="model.")
