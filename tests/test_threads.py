"""A training's CPU threads follow the cores it may use (shared.training.threads)."""

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from shared.training import threads
from shared.training.threads import ThreadsFollowCores


def test_threads_follow_the_allowed_cores_when_they_change_and_stay_as_set_while_they_do_not(monkeypatch):
    before = torch.get_num_threads()
    cores = iter([1, 1, 2, 2, 1])
    monkeypatch.setattr(threads, "allowed_cores", lambda: next(cores))
    callback = ThreadsFollowCores()
    try:
        torch.set_num_threads(1)
        seen = []
        for step in range(5):
            if step == 1:
                torch.set_num_threads(1)  # the user's choice stands while the cores stay the same
            callback.on_train_batch_start(None, None, None, step)
            seen.append(torch.get_num_threads())
        assert seen == [1, 1, 2, 2, 1]
    finally:
        torch.set_num_threads(before)


def test_a_run_whose_cores_never_change_keeps_the_threads_it_was_given(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "allowed_cores", lambda: 2)
    callback = ThreadsFollowCores()
    try:
        torch.set_num_threads(1)
        for step in range(3):
            callback.on_train_batch_start(None, None, None, step)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


class _ThreadCounter(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.threads = []

    def training_step(self, batch, batch_idx):
        self.threads.append(torch.get_num_threads())
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_training_takes_the_cores_it_is_given_while_it_runs(monkeypatch, tmp_path):
    before = torch.get_num_threads()
    cores = iter([1, 1, 1, 2, 2, 2])  # widened before the fourth step
    monkeypatch.setattr(threads, "allowed_cores", lambda: next(cores))
    model = _ThreadCounter()
    trainer = pl.Trainer(default_root_dir=tmp_path, max_steps=6, callbacks=[ThreadsFollowCores()], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    try:
        torch.set_num_threads(1)
        trainer.fit(model, DataLoader(torch.randn(12, 2), batch_size=2))
        assert model.threads == [1, 1, 1, 2, 2, 2]
    finally:
        torch.set_num_threads(before)


def test_every_apps_training_has_the_callback(monkeypatch):
    from pytorch_lightning.cli import LightningCLI

    from shared.training.cli import AttendCLI

    given = {}
    monkeypatch.setattr(LightningCLI, "__init__", lambda self, *args, trainer_defaults, **kwargs: given.update(trainer_defaults))
    AttendCLI(None, None, [])
    assert any(isinstance(callback, ThreadsFollowCores) for callback in given["callbacks"])
