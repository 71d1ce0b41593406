"""A two-process DDP run on shards, killed mid-epoch and resumed with ``fit --ckpt_path last``, goes
on from the next unseen utterance: over the epoch every rank sees exactly what a run never stopped
sees (no utterance twice, none missed), and its loss curve goes on where it stopped.

What this relies on, checked end to end rather than assumed: Lightning saves the training loader's
``state_dict`` in the checkpoint and gives it back on resume (LitData #775 / Lightning #20550 report
it does not for a ``StreamingDataLoader``), LitData replays its loader from that state without
hanging (LitData #213), and the duration buckets are the same number on both ranks (a rank with
fewer would leave the other waiting at the end of the epoch). The runs are child processes
(``python -m speech_attend.cli``) with a time limit, in a process group of their own so that the
kill reaches both ranks; :class:`RecordSteps`, loaded by them from this file, records each rank's
batches and holds the run at a chosen step until it is killed.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
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

from speech_attend.builtin.corpus import prepare_synth
from speech_attend.data.shards import write_speech_shards
from tests.helpers import TINY_SPEECH_CONFIG

pytestmark = pytest.mark.slow

ROOT = (
    Path(__file__).resolve().parents[2]
)  # on the children's PYTHONPATH: they import this module as tests.shared.test_shards_resume
TIMEOUT = 600  # seconds a run may take (under a minute on an idle 2-core machine) before the test fails instead of hanging
STOP_AT = 5  # the step the killed run is held at: past its first window of utterances, mid-epoch
STEPS = 16  # into the second epoch


class RecordSteps(pl.Callback):
    """Append each training batch's utterance keys to ``<out>/rank<R>.jsonl``; at global step
    ``stall_at``, write ``<out>/stalled<R>`` and wait to be killed."""

    def __init__(self, out: str, stall_at: int = -1):
        self.out, self.stall_at = Path(out), stall_at

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        random_state = hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()[:12]
        record = {"step": trainer.global_step, "epoch": trainer.current_epoch, "keys": list(batch.keys), "random": random_state}
        with (self.out / f"rank{trainer.global_rank}.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        if trainer.global_step == self.stall_at:
            (self.out / f"stalled{trainer.global_rank}").write_text("")
            time.sleep(TIMEOUT)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """32 training utterances in chunks of about four."""
    root = tmp_path_factory.mktemp("shards_resume")
    corpus = prepare_synth(root / "corpus", train=32, dev=2, test=2, seed=0, progress=False)
    assert write_speech_shards(corpus, str(root / "shards"), chunk_mb=0.2, progress=False)[0]
    return root / "shards"


def _config(path: Path, shards: Path, run: Path, keys: Path, stall_at: int = -1) -> Path:
    """Two CPU ranks; windows of 4 utterances cut into buckets of at most 2 and 5 s of padded audio,
    so a window makes 2 to 4 batches and the ranks' counts differ; a checkpoint every step."""
    config = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "devices": 2,
            "strategy": "ddp",
            "max_steps": STEPS,
            "val_check_interval": 1000,
            "check_val_every_n_epoch": None,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(run),
            "callbacks": [
                {
                    "class_path": "tests.shared.test_shards_resume.RecordSteps",
                    "init_args": {"out": str(keys), "stall_at": stall_at},
                }
            ],
        },
        "checkpoint": {"every_n_train_steps": 1},
        "model": copy.deepcopy(TINY_SPEECH_CONFIG["model"]),
        "data": {"shards": str(shards), "batch_size": 2, "eval_batch_size": 2, "shard_window": 4, "max_frames": 500},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """``python -m speech_attend.cli ARGS`` in a process group of its own, its output in ``log``."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "speech_attend.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _finish(process: subprocess.Popen, log: Path) -> None:
    try:
        code = process.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"the run hung:\n{log.read_text()[-3000:]}")
    assert code == 0, log.read_text()[-3000:]


def _records(keys: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (keys / f"rank{rank}.jsonl").read_text().splitlines()]


def _losses(run: Path) -> dict[int, float]:
    with (run / "metrics.csv").open() as f:
        rows = [row for row in csv.DictReader(f) if row.get("train/loss")]
    steps = [int(row["step"]) for row in rows]
    assert len(steps) == len(set(steps)), f"steps logged twice: {steps}"  # a run that started over logs them again
    return {int(row["step"]): float(row["train/loss"]) for row in rows}


def test_a_ddp_run_killed_mid_epoch_resumes_with_the_unseen_utterances_and_its_loss_curve(shards, tmp_path):
    straight = tmp_path / "straight"
    _finish(
        _start(["fit", "--config", str(_config(tmp_path / "a.yaml", shards, straight, tmp_path / "a"))], tmp_path / "a.log"),
        tmp_path / "a.log",
    )

    run, keys = tmp_path / "killed", tmp_path / "b"
    child = _start(
        ["fit", "--config", str(_config(tmp_path / "b.yaml", shards, run, keys, stall_at=STOP_AT))], tmp_path / "b.log"
    )
    deadline = time.monotonic() + TIMEOUT
    while not ((keys / "stalled0").exists() and (keys / "stalled1").exists()):
        if child.poll() is not None or time.monotonic() > deadline:
            os.killpg(child.pid, signal.SIGKILL)
            pytest.fail(f"the run ended or hung before step {STOP_AT}:\n{(tmp_path / 'b.log').read_text()[-3000:]}")
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)  # both ranks, mid-epoch
    child.wait(TIMEOUT)
    last = run / "version_0" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, map_location="cpu", weights_only=True)
    position = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert saved["global_step"] == STOP_AT and saved["epoch"] == 0
    assert position["window"] is not None and not position["complete"]  # LitData's own state is replayed, not just a skip

    resume = _config(tmp_path / "c.yaml", shards, run, keys)
    _finish(_start(["fit", "--config", str(resume), "--ckpt_path", "last"], tmp_path / "c.log"), tmp_path / "c.log")
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == STEPS

    epochs: dict[int, list[set]] = {}
    for rank in (0, 1):
        never_stopped = [(r["step"], r["keys"]) for r in _records(tmp_path / "a", rank)]
        recorded = [(r["step"], r["keys"]) for r in _records(keys, rank)]
        before, after = recorded[:STOP_AT], recorded[STOP_AT + 1 :]  # the batch held at STOP_AT was never trained on
        # each rank draws its own random numbers again (its own generators restored, not rank zero's);
        # the first resumed step's record is taken before the restore, the next ones after it
        randoms = [r["random"] for r in _records(tmp_path / "a", rank)], [r["random"] for r in _records(keys, rank)]
        assert randoms[1][STOP_AT + 2 :] == randoms[0][STOP_AT + 1 :], f"rank {rank}: random states differ after the resume"
        assert [step for step, _ in before] == list(range(STOP_AT))
        assert before + after == never_stopped, f"rank {rank}: the resumed run's batches are not those of a run never stopped"
        assert len(never_stopped) == STEPS  # the same number of steps on both ranks, or DDP would have hung
        for record in _records(tmp_path / "a", rank):
            epochs.setdefault(record["epoch"], [set(), set()])[rank].update(record["keys"])
        first_epoch = [key for record in _records(tmp_path / "a", rank) if record["epoch"] == 0 for key in record["keys"]]
        assert len(first_epoch) == len(set(first_epoch)), f"rank {rank} saw an utterance twice in an epoch"
    assert not epochs[0][0] & epochs[0][1]  # the ranks' utterances are disjoint

    curve, reference = _losses(run / "version_0"), _losses(straight / "version_0")
    assert sorted(curve) == list(range(STEPS))  # the killed run's steps, then the resumed ones, each once
    assert [curve[step] for step in range(STEPS)] == pytest.approx([reference[step] for step in range(STEPS)], rel=1e-4)
