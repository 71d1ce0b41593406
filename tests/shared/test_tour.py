"""The learning path `python -m shared.tour` runs and teaches what it claims."""

import re
import subprocess
import sys

from shared.tour import train_copy_task


def test_copy_task_learns_a_near_diagonal_attention():
    model, accuracy = train_copy_task(steps=150, log_every=0)
    assert accuracy >= 0.95
    import torch

    _, weights = model(torch.randint(12, (16, 8)))
    assert (weights.argmax(-1) == torch.arange(8)).float().mean() > 0.95


def test_tour_prints_the_seed_weights_and_the_copy_accuracy():
    result = subprocess.run([sys.executable, "-m", "shared.tour"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"the\s+score\s+1\.0\s+->\s+weight 0\.114", out)
    assert re.search(r"black\s+score\s+3\.0\s+->\s+weight 0\.844", out)
    assert re.search(r"cat\s+score\s+0\.0\s+->\s+weight 0\.042", out)
    accuracy = float(re.search(r"accuracy: ([0-9.]+)", out).group(1))
    assert accuracy >= 0.95
    assert "(batch, heads, sequence, features) = (2, 4, 5, 4)" in out
