"""What both apps' LightningModules share: the evaluation loop over a whole split, and the tag
that says which app a checkpoint belongs to.

Validation and test decode every item (never teacher-forced) and score the split as a whole,
as published numbers are computed (corpus BLEU, corpus WER), not as a mean of per-batch
numbers. An app's module calls :meth:`AttendModule.add_evaluation` from its validation and
test steps with one record per item (a dict with a unique ``key`` and the item's ``loss``) and implements
:meth:`~AttendModule.evaluation_metrics` and :meth:`~AttendModule.output_line`; the base class
gathers the records of every process (dropping the duplicates a distributed sampler pads
with), logs ``<stage>/<metric>``, and after ``test`` writes ``test_metrics.json`` and
``test_outputs.jsonl`` into the run folder.

Validation during ``fit`` also logs ``val/fit_seconds``, the wall time the run has trained so
far, and ``val/fit_cpu_seconds``, the processor time this process got for it (a resumed run goes
on counting both), so runs can be compared at equal time or equal compute, not equal steps.

Every validation and test also logs ``<stage>/distinct_outputs`` and ``<stage>/looping_outputs``
(:mod:`shared.evaluation.collapse`: the share of distinct outputs, and of outputs that repeat one
word), and warns once per run, in words, when most inputs get the same output or most outputs loop.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn

from ..evaluation.collapse import collapse_warning, output_collapse
from ..io.model_files import OMITTED_KEY, CheckpointError, ModelFiles, check_app_tag, model_tag
from ..io.writes import replacing

__all__ = ["AttendModule", "TEST_METRICS_FILE", "TEST_OUTPUTS_FILE"]

TEST_METRICS_FILE, TEST_OUTPUTS_FILE = "test_metrics.json", "test_outputs.jsonl"


class AttendModule(pl.LightningModule):
    """Base class of the apps' LightningModules (see the module docstring).

    Subclasses set ``app`` (``show-attend`` or ``speech-attend``), ``output_field`` and
    ``output_noun``, and keep their vocabulary in ``hparams["vocabulary"]``.
    """

    app: ClassVar[str] = ""
    output_field: ClassVar[str] = ""  # the record field holding an item's decoded text ("caption", "text")
    output_noun: ClassVar[str] = "outputs"  # what the collapse warning calls the outputs ("captions")

    def __init__(self) -> None:
        super().__init__()
        self._records: dict[str, list[dict]] = {}
        self._fit_seconds_before = 0.0  # wall time of the fit before this process (a resumed run)
        self._fit_cpu_seconds_before = 0.0  # and its processor time
        self._fit_started: tuple[float, float] | None = None  # (wall, processor) clocks at this process's start
        self._collapse_warned: set[str] = set()  # stages whose collapse was named already: once per run

    def fit_seconds(self) -> float:
        """Wall time this run has spent in ``fit``, across resumes."""
        running = 0.0 if self._fit_started is None else time.monotonic() - self._fit_started[0]
        return self._fit_seconds_before + running

    def fit_cpu_seconds(self) -> float:
        """Processor time (all threads of this process) this run has spent in ``fit``, across resumes."""
        running = 0.0 if self._fit_started is None else time.process_time() - self._fit_started[1]
        return self._fit_cpu_seconds_before + running

    # ------------------------------------------------------------------ the app's part

    @staticmethod
    def migrate_hyper_parameters(saved: dict) -> dict:
        """A saved model's hyper-parameters (a checkpoint's, an export's) in the current layout; an
        app maps its older layouts here (its ``model/migrations.py``), so that ``--ckpt_path`` and
        ``--init_from`` read them as its loaders do."""
        return dict(saved)

    def evaluation_metrics(self, records: list[dict]) -> dict[str, float | None]:
        """Metrics of a whole split from its records (every process's, each item once)."""
        raise NotImplementedError

    def output_line(self, record: dict) -> dict:
        """What ``test_outputs.jsonl`` holds for one item (plain JSON data)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the loop

    def add_evaluation(self, stage: str, records: list[dict], loss: torch.Tensor) -> None:
        """Keep a batch's decoded records (each with its item's ``loss``) and log the batch's
        teacher-forced loss as ``<stage>/loss``."""
        self.log(f"{stage}/loss", loss, batch_size=len(records), sync_dist=True)
        self._records.setdefault(stage, []).extend(records)

    def _gathered(self, stage: str) -> list[dict]:
        records = self._records.pop(stage, [])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            everyone: list = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(everyone, records)  # every rank scores the whole split
            records = [record for part in everyone for record in part]
        unique = {record["key"]: record for record in records}  # a distributed sampler pads with repeats
        return [unique[key] for key in sorted(unique)]

    def _finish_evaluation(self, stage: str) -> dict[str, Any]:
        records = self._gathered(stage)
        if not records:
            return {}
        metrics = self.evaluation_metrics(records)
        for name, value in metrics.items():
            if value is not None:  # equal on every rank (gathered), so the sync is exact
                self.log(f"{stage}/{name}", float(value), prog_bar=True, sync_dist=True)
        metrics.update(self._collapse(stage, records))
        loss = sum(record["loss"] for record in records) / len(records)  # each item once, whatever the ranks
        results = {**metrics, "loss": loss, "items": len(records)}
        if stage == "test":
            run_dir = Path(self.trainer.log_dir or self.trainer.default_root_dir)  # collective: every rank asks
            if self.trainer.is_global_zero:
                self._write_test_results(run_dir, results, records)
        return results

    def _collapse(self, stage: str, records: list[dict]) -> dict[str, float]:
        """Log the split's distinct and looping shares; name a collapse once per run (never in
        the sanity check, whose model is untrained)."""
        if not self.output_field:
            return {}
        collapse = output_collapse([record[self.output_field] for record in records])
        shares = {"distinct_outputs": collapse.distinct_share, "looping_outputs": collapse.looping_share}
        for name, value in shares.items():
            self.log(f"{stage}/{name}", value, sync_dist=True)  # equal on every rank (gathered)
        message = collapse_warning(collapse, "validation" if stage == "val" else stage, self.output_noun)
        sanity = self._trainer is not None and self.trainer.sanity_checking
        if message and not sanity and stage not in self._collapse_warned:
            self._collapse_warned.add(stage)
            rank_zero_warn(message)
        return shares

    def _write_test_results(self, run_dir: Path, results: dict, records: list[dict]) -> None:
        lines = [json.dumps(self.output_line(record), ensure_ascii=False) + "\n" for record in records]
        with replacing(run_dir / TEST_METRICS_FILE, "the test metrics") as temporary:  # whole, or a one-line error
            temporary.write_text(json.dumps(results, indent=2) + "\n")
        with replacing(run_dir / TEST_OUTPUTS_FILE, "the test outputs") as temporary:
            temporary.write_text("".join(lines), encoding="utf-8")
        shown = ", ".join(f"{k} {v:.4f}" for k, v in results.items() if isinstance(v, float))
        rank_zero_info(f"test metrics written to {run_dir / TEST_METRICS_FILE}: {shown}")

    def on_validation_epoch_start(self) -> None:
        self._records.pop("val", None)

    def on_test_epoch_start(self) -> None:
        self._records.pop("test", None)

    def on_fit_start(self) -> None:
        self._fit_started = (time.monotonic(), time.process_time())

    def on_validation_epoch_end(self) -> None:
        results = self._finish_evaluation("val")
        if results and self._fit_started is not None and not self.trainer.sanity_checking:
            self.log("val/fit_seconds", self.fit_seconds(), sync_dist=True)
            self.log("val/fit_cpu_seconds", self.fit_cpu_seconds(), sync_dist=True)

    def on_test_epoch_end(self) -> None:
        self._finish_evaluation("test")

    # ------------------------------------------------------------------ checkpoints

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint.update(model_tag(self.app))
        checkpoint["fit_seconds"], checkpoint["fit_cpu_seconds"] = self.fit_seconds(), self.fit_cpu_seconds()

    def load_model_weights(self, files: ModelFiles, where: str) -> None:
        """Start from a trained model's weights (``fit --init_from``), not from its run: the
        checkpoint hooks map them as they map a resumed run's (an app's older layouts, the frozen
        weights an export left out), and the clocks, the optimiser and the step start anew.

        Raises:
            CheckpointError: the weights do not fit this model (``where`` names the file).
        """
        checkpoint: dict[str, Any] = {
            **model_tag(self.app),
            "hyper_parameters": files.hyper_parameters,
            "state_dict": {f"model.{key}": value for key, value in files.state_dict.items()},
        }
        if files.omitted:
            checkpoint[OMITTED_KEY] = files.omitted
        self.on_load_checkpoint(checkpoint)
        prefix = "model."
        try:  # into the model: the module's own training state (a REINFORCE baseline) starts anew too
            self.model.load_state_dict({key[len(prefix) :]: value for key, value in checkpoint["state_dict"].items()})
        except RuntimeError as err:  # torch lists every key; its first lines say which and why
            raise CheckpointError(f"{where}: its weights do not fit the model ({' '.join(str(err).split())[:200]})") from None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_app_tag(checkpoint, self.app, "--ckpt_path")
        self._fit_seconds_before = float(checkpoint.get("fit_seconds", 0.0))
        self._fit_cpu_seconds_before = float(checkpoint.get("fit_cpu_seconds", 0.0))
        saved = (checkpoint.get("hyper_parameters") or {}).get("vocabulary")
        ours = self.hparams.get("vocabulary")
        if saved is not None and ours is not None and list(saved) != list(ours):
            raise CheckpointError(
                f"--ckpt_path: the checkpoint's vocabulary ({len(saved)} tokens) differs from this run's "
                f"({len(ours)} tokens); evaluate or resume it with the data it was trained on"
            )
