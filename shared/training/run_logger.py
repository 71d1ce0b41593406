"""The run's ``metrics.csv``: a CSV logger that continues a run's file instead of replacing it.

Lightning's CSV logger deletes ``metrics.csv`` when it finds one in its folder. In the run layout
(:mod:`shared.training.checkpoints`) a resumed ``fit`` and a ``test`` of a run's checkpoint
write into that run's folder, so its training curve would be lost; :class:`RunLogger` appends
to the file, widening its header when new columns come.
"""

from __future__ import annotations

import csv
import os

from lightning_fabric.loggers.logger import rank_zero_experiment
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

__all__ = ["RunLogger"]


class _AppendingWriter(ExperimentWriter):
    """Lightning's metrics writer, keeping the rows and columns already in ``metrics.csv``."""

    def _check_log_dir_exists(self) -> None:
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as file:
                self.metrics_keys = list(csv.DictReader(file).fieldnames or [])


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
