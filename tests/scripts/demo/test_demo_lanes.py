"""The demo's lanes (scripts/demo/lanes.py): both apps training at once, the one done first handing
its cores to the other, and a training's progress read from the run's own metrics.csv."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from scripts.demo.lanes import Lane, steps_done
from shared.training import threads
from shared.training.run_logger import RunLogger


def test_a_lanes_training_finds_the_product_s_callback_by_the_class_path_it_is_given(tmp_path):
    # The apps' trainings import the callback by name in their own process, from any folder.
    lane = Lane("recognizer", tmp_path / "recognizer.log", threads=1, max_steps=10, runs=tmp_path / "runs")
    option, _, path = lane.fit_options()
    module, _, name = option.split("=", 1)[1].rpartition(".")
    code = f"import importlib.util; print(importlib.util.find_spec({module!r}).origin)"  # found, not run: no Lightning to load
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=lane.env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == Path(threads.__file__).resolve()
    assert getattr(threads, name) is threads.ThreadsFromFile and path == str(lane.threads_file)


class _Progress(pl.Callback):
    """What :func:`steps_done` reads from the run's metrics.csv before each step of a running training."""

    def __init__(self, runs):
        self.runs, self.seen = runs, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.seen.append(steps_done(self.runs))


class _Logging(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch).pow(2).mean()
        self.log("train/loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_running_trainings_steps_are_read_from_its_metrics_file_as_it_logs_them(tmp_path):
    progress = _Progress(tmp_path)
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_steps=8,
        log_every_n_steps=2,
        logger=RunLogger(str(tmp_path)),
        callbacks=[progress],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(_Logging(), DataLoader(torch.randn(16, 2), batch_size=2))
    # before step k (k steps done) the file holds every second step: rows are written as they are logged
    assert progress.seen == [None, None, 2, 2, 4, 4, 6, 6]
    assert steps_done(tmp_path) == 8


def _metrics(run: Path, text: str) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.csv").write_text(text)
    return run / "metrics.csv"


def test_steps_done_counts_training_rows_and_a_row_only_once_it_is_whole(tmp_path):
    assert steps_done(tmp_path) is None
    header = "epoch,step,train/loss,val/cer\n"
    _metrics(tmp_path / "version_0", header + "0,19,3.3,\n0,39,3.0,\n0,39,,0.5\n")
    assert steps_done(tmp_path) == 40  # a row's step is the index of the step just taken; the validation row adds none
    _metrics(tmp_path / "version_0", header + "0,19,3.3,\n0,39,3.0,\n0,59")
    assert steps_done(tmp_path) == 40


def test_steps_done_reads_the_newest_run_and_not_an_earlier_runs_file(tmp_path):
    old = _metrics(tmp_path / "version_0", "epoch,step,train/loss\n0,999,1.0\n")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert steps_done(tmp_path, since=time.time()) is None  # the new run has written nothing yet
    _metrics(tmp_path / "version_1", "epoch,step,train/loss\n0,9,2.0\n")
    assert steps_done(tmp_path, since=time.time()) == 10


def test_a_lane_reads_its_trainings_step_from_the_runs_metrics_file(tmp_path):
    lane = Lane("captioner", tmp_path / "logs" / "captioner.log", threads=1, max_steps=1200, runs=tmp_path / "runs")
    assert lane.env["OMP_NUM_THREADS"] == "1"
    lane.begin("fit")
    assert lane.progress() == "fit: starting"
    with lane.log.open("a") as log:  # a progress bar in the log is not what the lane reads
        log.write("Epoch 2:  50%|#####     | 47/94 [00:10<00:10, 4.5it/s, v_num=0]")
    assert lane.progress() == "fit: starting"
    _metrics(tmp_path / "runs" / "version_0", "epoch,step,train/loss\n0,19,3.3\n2,234,1.1\n")
    assert lane.progress() == "fit: step 235/1200"
    _metrics(tmp_path / "runs" / "version_0", "epoch,step,train/loss\n12,1200,0.4\n")
    assert lane.progress() == "fit: step 1200/1200"  # never past max_steps
    lane.begin("explain")
    assert lane.progress() == "explain"


def test_a_widened_lane_hands_the_threads_to_its_training_and_its_next_commands(tmp_path):
    lane = Lane("recognizer", tmp_path / "recognizer.log", threads=1, max_steps=10, runs=tmp_path / "runs")
    lane.widen(2)
    assert lane.threads_file.read_text() == "2\n" and lane.env["OMP_NUM_THREADS"] == "2"
    assert list(tmp_path.glob("*.new")) == []
