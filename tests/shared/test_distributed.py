"""Both apps under DDP: 2 processes on the CPU (gloo), launched by Lightning from the command line.

Lightning starts the second rank by running the same command again, so every DDP run here is
a child process (``python -m show_attend.cli`` / ``speech_attend.cli``) with a time limit: a
hang fails the test instead of blocking the suite. Checked:

* both apps train a few steps on 2 ranks and leave a checkpoint;
* the recognizer's bucketed sampler gives the ranks disjoint utterances that together cover
  each epoch (recorded by :class:`RecordTrainingKeys`, loaded by the child from this file);
* test metrics over an odd-sized split (so Lightning's DistributedSampler pads the captioner's
  with a repeated image) are those of one process on the same checkpoint: every rank's outputs
  are gathered, and the padding's duplicate is dropped.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml

from show_attend.builtin.shapes import prepare_shapes
from show_attend.cli import main as caption_main
from speech_attend.cli import main as speech_main
from speech_attend.data.readers import read_corpus
from tests.helpers import TINY_SPEECH_CONFIG

pytestmark = pytest.mark.slow

ROOT = (
    Path(__file__).resolve().parents[2]
)  # on the children's PYTHONPATH: they import this module as tests.shared.test_distributed
TIMEOUT = 300  # seconds for one DDP run, start-up of both ranks included
DDP = {"accelerator": "cpu", "devices": 2, "strategy": "ddp"}
SINGLE = ["--trainer.devices", "1", "--trainer.strategy", "auto"]


class RecordTrainingKeys(pl.Callback):
    """Append each training batch's utterance keys to ``<out>/keys_rank<R>.jsonl``."""

    def __init__(self, out: str):
        self.out = Path(out)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        with (self.out / f"keys_rank{trainer.global_rank}.jsonl").open("a") as f:
            f.write(json.dumps({"epoch": trainer.current_epoch, "keys": list(batch.keys)}) + "\n")


def _run_ddp(app: str, args: list[str]) -> None:
    """``python -m <app>.cli ARGS`` to completion; its output is shown if it fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    env.setdefault("OMP_NUM_THREADS", "1")
    result = subprocess.run([sys.executable, "-m", f"{app}.cli", *args], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def _write(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


# ---------------------------------------------------------------- recognizer


@pytest.fixture(scope="module")
def recognizer_ddp(tmp_path_factory) -> dict:
    """A 4-step fit on 2 ranks (8 utterances, batches of 4: one batch per rank and epoch)."""
    root = tmp_path_factory.mktemp("speech_ddp")
    corpus = root / "synth"
    assert speech_main(["prepare", "synth", "--out", str(corpus), "--train", "8", "--dev", "2", "--test", "5"]) == 0
    run = root / "run"
    config = _write(
        root / "ddp.yaml",
        {
            "seed_everything": 0,
            "trainer": {
                **DDP,
                "max_steps": 4,
                "limit_val_batches": 1,
                "num_sanity_val_steps": 0,
                "enable_progress_bar": False,
                "enable_model_summary": False,
                "default_root_dir": str(run),
                "callbacks": [
                    {"class_path": "tests.shared.test_distributed.RecordTrainingKeys", "init_args": {"out": str(root / "keys")}}
                ],
            },
            "model": copy.deepcopy(TINY_SPEECH_CONFIG["model"]),
            "data": {"data_dir": str(corpus), "batch_size": 4, "eval_batch_size": 4, "cache_audio": True},
        },
    )
    _run_ddp("speech_attend", ["fit", "--config", str(config)])
    return {"root": root, "corpus": corpus, "config": config, "ckpt": next(run.rglob("last.ckpt"))}


def test_recognizer_trains_on_two_ranks(recognizer_ddp):
    checkpoint = torch.load(recognizer_ddp["ckpt"], map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 4


def test_recognizer_ranks_get_disjoint_utterances_that_cover_each_epoch(recognizer_ddp):
    every = {u.utt_id for u in read_corpus(recognizer_ddp["corpus"], "train")}
    seen: dict[int, dict[int, list[str]]] = {}  # epoch -> rank -> keys
    for rank in (0, 1):
        for line in (recognizer_ddp["root"] / "keys" / f"keys_rank{rank}.jsonl").read_text().splitlines():
            record = json.loads(line)
            seen.setdefault(record["epoch"], {}).setdefault(rank, []).extend(record["keys"])
    assert sorted(seen) == [0, 1, 2, 3]  # 4 steps, one batch per rank and epoch
    for epoch, ranks in seen.items():
        first, second = ranks[0], ranks[1]
        assert len(set(first)) == len(first) and len(set(second)) == len(second)
        assert not set(first) & set(second), f"epoch {epoch}: both ranks trained on {set(first) & set(second)}"
        assert set(first) | set(second) == every, f"epoch {epoch}: {every - set(first) - set(second)} left out"


def test_recognizer_test_metrics_on_two_ranks_equal_one_process(recognizer_ddp, tmp_path):
    common = ["test", "--config", str(recognizer_ddp["config"]), "--ckpt_path", str(recognizer_ddp["ckpt"])]
    _run_ddp("speech_attend", [*common, "--trainer.default_root_dir", str(tmp_path / "two"), "--trainer.logger", "false"])
    assert speech_main([*common, *SINGLE, "--trainer.default_root_dir", str(tmp_path / "one"), "--trainer.logger", "false"]) == 0
    two = json.loads((tmp_path / "two" / "test_metrics.json").read_text())
    one = json.loads((tmp_path / "one" / "test_metrics.json").read_text())
    assert one["items"] == two["items"] == 5
    assert (two["wer"], two["cer"]) == (one["wer"], one["cer"])
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)  # the whole split's, not rank zero's share


# ---------------------------------------------------------------- captioner


@pytest.fixture(scope="module")
def captioner_ddp(tmp_path_factory) -> dict:
    """A 200-step fit on 2 ranks (enough for captions that differ between images), not validated
    on the way (the test needs only its last checkpoint); 5 test images, so the 2 ranks' shards
    are padded with a repeat."""
    root = tmp_path_factory.mktemp("caption_ddp")
    shapes = root / "shapes"
    prepare_shapes(shapes, train=24, val=3, test=5, seed=1, image_size=32, max_objects=2, progress=False)
    run = root / "run"
    config = _write(
        root / "ddp.yaml",
        {
            "seed_everything": 0,
            "trainer": {
                **DDP,
                "max_steps": 200,
                "num_sanity_val_steps": 0,
                "check_val_every_n_epoch": 1000,
                "enable_progress_bar": False,
                "enable_model_summary": False,
                "default_root_dir": str(run),
            },
            "model": {
                "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
                "decoder": {"embed_dim": 24, "attention_dim": 24, "hidden_dim": 32, "dropout": 0.0},
                "optimizer": {"lr": 0.003},
                "decoding": {"beam_size": 2, "max_length": 12},
            },
            # one image per evaluation batch: each image is decoded by the same arithmetic on 1 or 2 ranks
            "data": {"data_dir": str(shapes), "image_size": 32, "batch_size": 8, "eval_batch_size": 1, "min_word_freq": 1},
        },
    )
    _run_ddp("show_attend", ["fit", "--config", str(config)])
    return {"root": root, "config": config, "ckpt": run / "version_0" / "checkpoints" / "last.ckpt"}


def test_captioner_trains_on_two_ranks(captioner_ddp):
    checkpoint = torch.load(captioner_ddp["ckpt"], map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 200


def test_captioner_test_metrics_on_two_ranks_equal_one_process(captioner_ddp, tmp_path):
    common = ["test", "--config", str(captioner_ddp["config"]), "--ckpt_path", str(captioner_ddp["ckpt"])]
    _run_ddp("show_attend", [*common, "--trainer.default_root_dir", str(tmp_path / "two")])
    assert caption_main([*common, *SINGLE, "--trainer.default_root_dir", str(tmp_path / "one")]) == 0
    two, one = tmp_path / "two" / "version_0", tmp_path / "one" / "version_0"
    two_metrics, one_metrics = (json.loads((run / "test_metrics.json").read_text()) for run in (two, one))
    assert one_metrics["items"] == two_metrics["items"] == 5  # the padding's repeated image counted once
    assert two_metrics.keys() == one_metrics.keys()
    # Text metrics come from the same captions and must agree exactly; the loss is a float32 sum over
    # batches of another size and grouping on two ranks, so it agrees to float32 rounding.
    for name, value in one_metrics.items():  # None: a metric not computed (METEOR without Java)
        tolerance = 1e-5 if name == "loss" else 1e-9
        assert two_metrics[name] == (value if value is None else pytest.approx(value, rel=tolerance)), name
    assert (two / "test_outputs.jsonl").read_text() == (one / "test_outputs.jsonl").read_text()
    # The comparison can catch a caption paired with the wrong image only if the captions differ.
    captions = [json.loads(line)["caption"] for line in (one / "test_outputs.jsonl").read_text().splitlines()]
    assert len(set(captions)) > 1, f"the 200-step model wrote one caption for every test image: {captions[0]!r}"
