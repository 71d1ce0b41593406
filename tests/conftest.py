"""Tiny data shared by the test modules, made once per session.

Every fixture here is read-only: a test that damages files (bad-input tests) copies them first.
"""

import os
from pathlib import Path

import pytest
import torch

from show_attend.builtin.shapes import prepare_shapes
from speech_attend.builtin.corpus import prepare_synth


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
