"""Fixtures shared by the test modules: tiny data made once per test run, and the bad-input runs.

Every data fixture made once here is read-only: a test that damages files (bad-input tests) copies them first.
The bad-input runs (``caption_run``, ``speech_run``) train on such damaged copies, once per module that
uses them. Helpers that tests call themselves are in ``tests/helpers.py``.
"""

import os
from pathlib import Path

import pytest
import torch

from show_attend.builtin.shapes import prepare_shapes
from show_attend.cli import main as show_attend
from speech_attend.builtin.corpus import prepare_synth
from speech_attend.cli import main as speech_attend
from tests.helpers import (
    as_truncated_jpeg,
    caption_config,
    rewrite,
    shapes_copy,
    speech_config,
    synth_copy,
    truncate,
    unusual_images,
)


def pytest_configure(config):
    """Under pytest-xdist (``make test`` runs ``-n auto``), each worker takes its share of the cores,
    and so do the programs its tests start: two workers of two threads each on two cores run slower."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        threads = str(max(1, cores // int(workers)))
        os.environ["OMP_NUM_THREADS"] = threads
        torch.set_num_threads(int(threads))


@pytest.fixture(scope="session")
def tiny_shapes(tmp_path_factory) -> Path:
    """24/4/4 scenes of at most 2 shapes, 32x32 pixels (Karpathy JSON + PNGs)."""
    out = tmp_path_factory.mktemp("tiny_shapes")
    prepare_shapes(out, train=24, val=4, test=4, seed=1, image_size=32, max_objects=2, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_synth(tmp_path_factory) -> Path:
    """8/2/2 synthesised utterances in LibriSpeech layout (dev and test voices unseen in train)."""
    return prepare_synth(tmp_path_factory.mktemp("tiny_synth") / "corpus", train=8, dev=2, test=2, seed=0, progress=False)


@pytest.fixture(scope="module")
def caption_run(tiny_shapes, tmp_path_factory) -> dict:
    """`show-attend fit` for one epoch on data with three unreadable training images."""
    folder = tmp_path_factory.mktemp("caption_bad")
    data, train = shapes_copy(tiny_shapes, folder)
    truncate(train[0])
    train[1].write_text("a text file, not a PNG\n")
    jpeg = as_truncated_jpeg(data, train[2])
    unusual_images(train[3:7])
    config = caption_config(folder, data)
    code = show_attend(["fit", "--config", str(config), "--bad_samples.min_samples", "16", "--bad_samples.max_fraction", "0.25"])
    return {"code": code, "data": data, "config": config, "run": folder / "run", "bad": {str(train[0]), str(train[1]), str(jpeg)}}


@pytest.fixture(scope="module")
def speech_run(tiny_synth, tmp_path_factory) -> dict:
    """`speech-attend fit` for one epoch (2 batches of 4) on 8 utterances, two of them unreadable
    and three at other rates and channel counts."""
    folder = tmp_path_factory.mktemp("speech_bad")
    corpus, files = synth_copy(tiny_synth, folder)
    train = files["train"]
    truncate(train[0])
    train[1].write_bytes(b"")
    rewrite(train[2], 48000, 2)
    rewrite(train[3], 8000, 1)
    rewrite(train[4], 44100, 2)
    config = speech_config(folder)
    run = folder / "run"
    code = speech_attend(
        [
            "fit",
            "--config",
            str(config),
            "--data.data_dir",
            str(corpus),
            "--trainer.default_root_dir",
            str(run),
            "--bad_samples.min_samples",
            "8",
            "--bad_samples.max_fraction",
            "0.3",
        ]
    )
    checkpoints = sorted(run.rglob("last.ckpt"))
    return {
        "code": code,
        "corpus": corpus,
        "config": config,
        "run": run,
        "ckpt": checkpoints[0] if checkpoints else None,
        "bad": {str(train[0]): "truncated|not a readable audio file", str(train[1]): "file is empty"},
    }
