"""A running training's thread count changed from outside through a file (shared/training/threads.py)."""

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from shared.training.threads import ThreadsFromFile


class _ThreadCounter(pl.LightningModule):
    """Records torch's thread count at each step and can write the threads file before a given step."""

    def __init__(self, path, writes):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.path, self.writes = path, writes  # {step: text written at the end of that step}
        self.threads = []

    def training_step(self, batch, batch_idx):
        self.threads.append(torch.get_num_threads())
        if batch_idx in self.writes:
            self.path.write_text(self.writes[batch_idx])
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(tmp_path, writes, steps=6):
    path = tmp_path / "run.threads"
    model = _ThreadCounter(path, writes)
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_steps=steps,
        callbacks=[ThreadsFromFile(str(path))],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        trainer.fit(model, DataLoader(torch.randn(2 * steps, 2), batch_size=2))
        return model.threads
    finally:
        torch.set_num_threads(before)


def test_a_running_training_takes_the_threads_written_to_its_file_from_the_next_step(tmp_path):
    assert _fit(tmp_path, {1: "2\n", 3: "1\n"}) == [1, 1, 2, 2, 1, 1]


def test_no_file_leaves_the_threads_alone(tmp_path):
    assert _fit(tmp_path, {}) == [1] * 6


def test_a_file_without_a_positive_number_is_reported_and_ignored(tmp_path, recwarn):
    assert _fit(tmp_path, {1: "two\n", 3: "0\n"}) == [1] * 6
    warned = [str(w.message) for w in recwarn if "run.threads" in str(w.message)]
    assert len(warned) == 2 and "expected a positive whole number of threads, got 'two'" in warned[0]


def test_an_unreadable_threads_file_is_reported_and_the_training_goes_on(tmp_path, recwarn):
    (tmp_path / "run.threads").mkdir()  # a folder where the file should be
    assert _fit(tmp_path, {}) == [1] * 6
    warned = [str(w.message) for w in recwarn if "run.threads" in str(w.message)]
    assert len(warned) == 1 and "cannot be read as a number of threads (IsADirectoryError)" in warned[0]
