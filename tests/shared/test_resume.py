"""A training run killed at any moment keeps its last whole checkpoint, and ``fit --ckpt_path last`` resumes it.

What is checked, on both apps' command lines with tiny models:

* a run SIGKILLed after an end-of-epoch checkpoint and resumed ends with exactly the weights
  of a run never interrupted (the random generators travel in the checkpoint,
  :class:`shared.training.resume.ExactResume`);
* a run SIGKILLed at an arbitrary moment mid-epoch resumes and completes, continuing its
  optimizer and loss. Its weights are *not* those of an uninterrupted run: Lightning starts the
  interrupted epoch's loader again from the first batch (the apps' loaders hold no position),
  so some batches of that epoch are seen twice;
* SIGTERM saves ``last.ckpt`` at the step reached and exits with 143;
* checkpoint files are replaced atomically: a process killed while writing one leaves the
  previous one whole. Lightning's own writer is atomic only when ``$TMPDIR`` shares the
  checkpoint's filesystem (see :class:`shared.training.checkpoints.AtomicCheckpointIO`).

The killed runs are separate processes (``python -m show_attend.cli`` / ``speech_attend.cli``);
:class:`StallAtStep`, loaded by them from this file, holds a run at a chosen step so that the
kill lands after a known checkpoint.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml

from shared.training.checkpoints import SIGTERM_EXIT_CODE, AtomicCheckpointIO, find_checkpoint
from show_attend.builtin.shapes import prepare_shapes
from show_attend.cli import main as caption_main
from speech_attend.cli import main as speech_main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]  # on the children's PYTHONPATH: they import this module as tests.shared.test_resume
TIMEOUT = 300  # seconds a child run may take before the test fails instead of hanging


class StallAtStep(pl.Callback):
    """Wait before the training batch after step ``step`` until SIGTERM arrives (or ``seconds``
    pass); a file ``stalled`` in the run directory says the wait has begun."""

    def __init__(self, step: int, seconds: float = 120.0):
        self.step, self.seconds = step, seconds

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        (Path(trainer.default_root_dir) / "stalled").write_text(str(self.step))
        deadline = time.monotonic() + self.seconds
        while not trainer.received_sigterm and time.monotonic() < deadline:
            time.sleep(0.02)


# ---------------------------------------------------------------- helpers


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def _one_thread():
    """The killed runs are child processes on one thread; the runs in this process must add up
    their floats in the same order, whatever thread count earlier tests left behind."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _start(app: str, args: list[str], log: Path) -> subprocess.Popen:
    """``python -m <app>.cli ARGS`` in the background, its output in ``log``."""
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", f"{app}.cli", *args], stdout=out, stderr=subprocess.STDOUT, env=_env())


def _wait_for(condition, process: subprocess.Popen, log: Path, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"the run ended (code {process.returncode}) before it was killed:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"timed out waiting for the run:\n{log.read_text()[-3000:]}")
        time.sleep(0.01)


def _global_step(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=True)["global_step"])


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def _assert_same_weights(a: Path, b: Path) -> None:
    first, second = _weights(a), _weights(b)
    assert first.keys() == second.keys()
    different = [name for name in first if not torch.equal(first[name], second[name])]
    assert not different, f"{len(different)} of {len(first)} tensors differ, e.g. {different[:3]}"


def _write_config(path: Path, config: dict, stall_at: int | None = None) -> Path:
    if stall_at is not None:
        config = {
            **config,
            "trainer": {
                **config["trainer"],
                "callbacks": [{"class_path": "tests.shared.test_resume.StallAtStep", "init_args": {"step": stall_at}}],
            },
        }
    path.write_text(yaml.safe_dump(config))
    return path


def _train_losses(run: Path, name: str = "train/loss") -> list[float]:
    """The training losses logged into a run's ``metrics.csv`` (every step), in order. A resumed
    run appends the steps after its checkpoint to the interrupted run's rows; one that silently
    started over would log the first steps a second time."""
    with (run / "metrics.csv").open() as f:
        rows = [row for row in csv.DictReader(f) if row.get(name)]
    return [float(row[name]) for row in sorted(rows, key=lambda row: int(row["step"]))]


# ---------------------------------------------------------------- captioner


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shapes")
    prepare_shapes(out, train=24, val=3, test=3, seed=1, image_size=32, max_objects=2, progress=False)
    return out


def _caption_config(data_dir: Path, run_dir: Path, max_steps: int, **trainer) -> dict:
    """Batches of 8 from 24 images: an epoch is 3 steps, validated (and checkpointed) at its end."""
    return {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": max_steps,
            "val_check_interval": 3,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(run_dir),
            **trainer,
        },
        "model": {
            "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
            "decoder": {"embed_dim": 24, "attention_dim": 24, "hidden_dim": 32, "dropout": 0.2},
            "optimizer": {"lr": 0.003},
            "decoding": {"beam_size": 2, "max_length": 12},
        },
        "data": {"data_dir": str(data_dir), "image_size": 32, "batch_size": 8, "min_word_freq": 1},
    }


def test_captioner_killed_after_an_epoch_checkpoint_resumes_to_the_same_weights(shapes, tmp_path):
    straight = tmp_path / "straight"
    assert caption_main(["fit", "--config", str(_write_config(tmp_path / "a.yaml", _caption_config(shapes, straight, 6)))]) == 0

    run = tmp_path / "killed"
    config = _caption_config(shapes, run, 6)
    last = run / "version_0" / "checkpoints" / "last.ckpt"
    child = _start(
        "show_attend", ["fit", "--config", str(_write_config(tmp_path / "b.yaml", config, stall_at=3))], tmp_path / "b.log"
    )
    try:
        _wait_for((run / "stalled").is_file, child, tmp_path / "b.log")  # after epoch 0's checkpoint
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(TIMEOUT)
    assert child.returncode == -signal.SIGKILL
    assert _global_step(last) == 3

    resume = _write_config(tmp_path / "c.yaml", config)
    assert caption_main(["fit", "--config", str(resume), "--ckpt_path", "last"]) == 0
    assert _global_step(last) == 6 and not (run / "version_1").exists()  # the run went on in its own folder
    _assert_same_weights(straight / "version_0" / "checkpoints" / "last.ckpt", last)
    # the same curve, in one file: the killed run's three steps, then the resumed three
    assert _train_losses(run / "version_0") == _train_losses(straight / "version_0")


def test_captioner_sigterm_saves_the_step_reached_and_exits_143_then_resumes(shapes, tmp_path):
    run = tmp_path / "run"
    config = _caption_config(shapes, run, 6)
    last = run / "version_0" / "checkpoints" / "last.ckpt"
    child = _start(
        "show_attend", ["fit", "--config", str(_write_config(tmp_path / "a.yaml", config, stall_at=4))], tmp_path / "a.log"
    )
    try:
        _wait_for((run / "stalled").is_file, child, tmp_path / "a.log")
        child.send_signal(signal.SIGTERM)  # the stalled fifth step runs, then the run stops
        child.wait(TIMEOUT)
    finally:
        child.kill()
    log = (tmp_path / "a.log").read_text()
    assert child.returncode == SIGTERM_EXIT_CODE, log[-3000:]
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 5 and checkpoint["optimizer_states"]
    assert caption_main(["fit", "--config", str(_write_config(tmp_path / "b.yaml", config)), "--ckpt_path", "last"]) == 0
    assert _global_step(last) == 6
    assert len(_train_losses(run / "version_0")) == 6  # five before SIGTERM, one after the resume


# ---------------------------------------------------------------- recognizer


def _speech_config(corpus: Path, run_dir: Path, max_steps: int, **trainer) -> dict:
    """Batches of 4 from 8 utterances: an epoch is 2 steps. The shared run layout (``<root>/version_N``)."""
    return {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": max_steps,
            "limit_val_batches": 1,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,  # sanity check on, as in the shipped configs
            "enable_model_summary": False,
            "default_root_dir": str(run_dir),
            **trainer,
        },
        "model": {  # dropout and SpecAugment (by default on) draw from the random generators
            "las": {
                "listener_hidden": 8,
                "pyramid_layers": 2,
                "speller_hidden": 16,
                "embedding_dim": 8,
                "attention_dim": 8,
                "location_filters": 2,
                "location_kernel": 5,
                "ctc_upsample": 2,
            },
            "decoding": {"beam_size": 2, "val_beam_size": 1, "max_len_ratio": 1.0},
            "optimizer": {"warmup_steps": 1},
        },
        "data": {"data_dir": str(corpus), "batch_size": 4, "eval_batch_size": 4, "cache_audio": True},
    }


def test_last_and_best_are_the_newest_run_that_has_them(tmp_path):
    assert find_checkpoint(tmp_path, "last") is None
    for version, name in ((2, "last"), (10, "last"), (11, "last_good"), (3, "best")):
        path = tmp_path / f"version_{version}" / "checkpoints" / f"{name}.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    (tmp_path / "other" / "checkpoints").mkdir(parents=True)
    (tmp_path / "other" / "checkpoints" / "last.ckpt").write_bytes(b"")  # not a run of this root
    assert find_checkpoint(tmp_path, "last") == tmp_path / "version_10" / "checkpoints" / "last.ckpt"  # 10 > 2, not by name
    assert find_checkpoint(tmp_path, "best") == tmp_path / "version_3" / "checkpoints" / "best.ckpt"


def test_recognizer_killed_after_an_epoch_checkpoint_resumes_to_the_same_weights(tiny_synth, tmp_path):
    straight = tmp_path / "straight"
    assert speech_main(["fit", "--config", str(_write_config(tmp_path / "a.yaml", _speech_config(tiny_synth, straight, 4)))]) == 0

    run = tmp_path / "killed"
    config = _speech_config(tiny_synth, run, 4)
    last = run / "version_0" / "checkpoints" / "last.ckpt"
    child = _start(
        "speech_attend", ["fit", "--config", str(_write_config(tmp_path / "b.yaml", config, stall_at=2))], tmp_path / "b.log"
    )
    try:
        _wait_for((run / "stalled").is_file, child, tmp_path / "b.log")  # after epoch 0's validation and checkpoint
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(TIMEOUT)
    assert _global_step(last) == 2

    assert speech_main(["fit", "--config", str(_write_config(tmp_path / "c.yaml", config)), "--ckpt_path", "last"]) == 0
    assert _global_step(last) == 4 and not (run / "version_1").exists()  # the run went on in its own folder
    _assert_same_weights(straight / "version_0" / "checkpoints" / "last.ckpt", last)
    assert _train_losses(run / "version_0") == _train_losses(straight / "version_0")
    # The run's wall and processor time go on counting across the resume (checked on the validations' rows).
    seconds, cpu = (_train_losses(run / "version_0", name) for name in ("val/fit_seconds", "val/fit_cpu_seconds"))
    assert len(seconds) == len(cpu) == 2 and 0 < seconds[0] < seconds[1] and 0 < cpu[0] < cpu[1]
    saved = torch.load(last, map_location="cpu", weights_only=True)
    assert saved["fit_seconds"] >= seconds[1] and saved["fit_cpu_seconds"] >= cpu[1]


def test_recognizer_killed_mid_epoch_resumes_and_its_training_continues(tiny_synth, tmp_path):
    run = tmp_path / "run"
    max_steps = 12
    config = _speech_config(tiny_synth, run, max_steps, val_check_interval=2)
    _write_config(tmp_path / "run.yaml", config)
    periodic = ["--checkpoint.every_n_train_steps", "1"]
    last = run / "version_0" / "checkpoints" / "last.ckpt"
    child = _start("speech_attend", ["fit", "--config", str(tmp_path / "run.yaml"), *periodic], tmp_path / "a.log")
    try:  # a checkpoint every step, so the kill most likely lands while one is being written
        _wait_for(lambda: last.is_file() and _global_step(last) >= 3, child, tmp_path / "a.log")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(TIMEOUT)
    killed_at = _global_step(last)  # loads with weights_only=True: whole, whatever the moment of the kill
    assert 3 <= killed_at < max_steps

    assert speech_main(["fit", "--config", str(tmp_path / "run.yaml"), *periodic, "--ckpt_path", "last"]) == 0
    resumed = torch.load(last, map_location="cpu", weights_only=True)
    assert resumed["global_step"] == max_steps
    adam_steps = {int(state["step"]) for state in resumed["optimizer_states"][0]["state"].values()}
    assert adam_steps == {max_steps}  # the optimizer went on from its saved state, not from zero


def test_recognizer_sigterm_saves_the_step_reached_and_exits_143(tiny_synth, tmp_path):
    run = tmp_path / "run"
    config = _write_config(tmp_path / "a.yaml", _speech_config(tiny_synth, run, 6), stall_at=3)
    child = _start("speech_attend", ["fit", "--config", str(config)], tmp_path / "a.log")
    try:
        _wait_for((run / "stalled").is_file, child, tmp_path / "a.log")
        child.send_signal(signal.SIGTERM)  # mid-epoch: the fourth step runs, then the run stops
        child.wait(TIMEOUT)
    finally:
        child.kill()
    assert child.returncode == SIGTERM_EXIT_CODE, (tmp_path / "a.log").read_text()[-3000:]
    assert _global_step(run / "version_0" / "checkpoints" / "last.ckpt") == 4


def test_recognizer_sigterm_under_ddp_stops_every_rank_with_143_and_saves_the_step_reached(tiny_synth, tmp_path):
    # What a scheduler does to a 2-process job: SIGTERM to the launching process (rank zero),
    # which Lightning passes on to the other rank. Both ranks stall before step 4 until it arrives.
    run = tmp_path / "run"
    config = _write_config(tmp_path / "a.yaml", _speech_config(tiny_synth, run, 20, devices=2, strategy="ddp"), stall_at=3)
    child = _start("speech_attend", ["fit", "--config", str(config)], tmp_path / "a.log")
    try:
        _wait_for((run / "stalled").is_file, child, tmp_path / "a.log")
        child.send_signal(signal.SIGTERM)
        child.wait(TIMEOUT)  # a rank left waiting in a collective would hang here and fail the test
    finally:
        child.kill()
    log = (tmp_path / "a.log").read_text()
    assert child.returncode == SIGTERM_EXIT_CODE, log[-3000:]
    checkpoints = list(run.rglob("last.ckpt"))
    assert len(checkpoints) == 1 and _global_step(checkpoints[0]) == 4, log[-3000:]
    assert "SIGTERM: saved" in log


# ---------------------------------------------------------------- atomic writes

_WRITER = """
import itertools, sys, torch
from shared.training.checkpoints import AtomicCheckpointIO
io, target = AtomicCheckpointIO(), sys.argv[1]
for i in itertools.count():
    io.save_checkpoint({"i": i, "w": torch.full((4_000_000,), float(i))}, target)
"""


def test_a_checkpoint_killed_while_being_written_leaves_the_previous_one_whole(tmp_path):
    target = tmp_path / "checkpoints" / "last.ckpt"
    temporaries = lambda: list(target.parent.glob(".last.ckpt.*.tmp"))  # noqa: E731
    killed_mid_write = 0
    for attempt in range(3):
        log, start = tmp_path / f"writer{attempt}.log", time.time_ns()
        with log.open("w") as out:
            child = subprocess.Popen(
                [sys.executable, "-c", _WRITER, str(target)], stdout=out, stderr=subprocess.STDOUT, env=_env()
            )
        try:
            # a complete file from this writer, then the next one half written
            _wait_for(lambda: target.is_file() and target.stat().st_mtime_ns > start and temporaries(), child, log)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(TIMEOUT)
        killed_mid_write += bool(temporaries())
        saved = torch.load(target, map_location="cpu", weights_only=True)
        assert saved["w"].shape == (4_000_000,) and bool((saved["w"] == saved["i"]).all())
        if killed_mid_write:
            break  # a kill landed mid-write and the file survived it; the other attempts are for a kill that landed between writes
    assert killed_mid_write, "no kill landed during a write; the test did not test anything"
    AtomicCheckpointIO().save_checkpoint({"i": -1}, target)
    assert torch.load(target, weights_only=True) == {"i": -1} and not temporaries()  # stale halves are cleared
