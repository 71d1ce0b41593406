"""The run's ``metrics.csv``: a CSV logger that continues a run's file instead of replacing it.

Lightning's CSV logger deletes ``metrics.csv`` when it finds one in its folder. In the run layout
(:mod:`shared.training.checkpoints`) a resumed ``fit`` and a ``test`` of a run's checkpoint
write into that run's folder, so its training curve would be lost; :class:`RunLogger` appends
to the file, widening its header when new columns come.

No row already written is lost to a failed write (a full disk): new rows are appended and synced,
and a failed append is cut back to the rows before it; a wider header is written with every row
into a new file that replaces the old one (Lightning's writer truncates the file first). A failure
is a :class:`~shared.io.writes.WriteError` naming the file; the rows not written stay in
memory for the next try.
"""

from __future__ import annotations

import csv
import os

from lightning_fabric.loggers.logger import rank_zero_experiment
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.utilities import rank_zero_only, rank_zero_warn

from ..io.writes import WriteError, replacing, writing

__all__ = ["RunLogger"]

_WHAT = "the run's metrics"


class _AppendingWriter(ExperimentWriter):
    """Lightning's metrics writer, keeping the rows and columns already in ``metrics.csv``."""

    def _check_log_dir_exists(self) -> None:
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as file:
                self.metrics_keys = list(csv.DictReader(file).fieldnames or [])

    def log_hparams(self, params: dict) -> None:
        with writing("the run's hyper-parameters", os.path.join(self.log_dir, self.NAME_HPARAMS_FILE)):
            super().log_hparams(params)

    def save(self) -> None:
        """Write the rows logged since the last call into ``metrics.csv``."""
        if not self.metrics:
            return
        path = self.metrics_file_path
        keys = sorted(set(self.metrics_keys).union(*self.metrics))
        if os.path.isfile(path) and keys == self.metrics_keys:
            self._append(path)
        else:
            self._rewrite(path, keys)
        self.metrics_keys, self.metrics = keys, []

    def _append(self, path: str) -> None:
        size = os.path.getsize(path)
        with writing(_WHAT, path):
            try:
                with open(path, "a", newline="") as file:
                    csv.DictWriter(file, fieldnames=self.metrics_keys).writerows(self.metrics)
                    file.flush()
                    os.fsync(file.fileno())
            except BaseException:
                os.truncate(path, size)  # no half-written row at the end
                raise

    def _rewrite(self, path: str, keys: list[str]) -> None:
        rows = []
        if os.path.isfile(path):
            with open(path, newline="") as file:
                rows = list(csv.DictReader(file))
        with replacing(path, _WHAT) as temporary, open(temporary, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows + self.metrics)


class RunLogger(CSVLogger):
    """:class:`~pytorch_lightning.loggers.CSVLogger` that appends to an existing ``metrics.csv``.

    Args:
        save_dir (str): the runs' root (``trainer.default_root_dir``).
        version (int or None, optional): the run ``version_N`` to write into; the next free one
            when ``None``. (Default: ``None``)
    """

    def __init__(self, save_dir: str, version: int | None = None):
        super().__init__(save_dir=save_dir, name="", version=version)

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment

    @rank_zero_only
    def finalize(self, status: str) -> None:
        try:
            super().finalize(status)
        except WriteError as err:
            if status != "failed":
                raise
            # the run is already ending with an error (often the same full disk): that one is reported
            rank_zero_warn(f"{err}; the rows logged since its last successful write are lost")
