"""The demo keeps to its minutes (scripts/demo/run.py): each training gets what is left once the
stages after it are set aside, Lightning stops it there, and the demo reads the step it reached."""

from pathlib import Path

import yaml
from pytorch_lightning.callbacks import Timer

from scripts.demo.run import MIN_TRAINING_S, reached, training_limit
from shared.training.schedule import max_time
from speech_attend.cli import main as speech_main
from tests.helpers import tiny_speech_config


def test_a_training_gets_the_time_left_less_the_stages_after_it_and_never_less_than_the_floor():
    assert training_limit(deadline=1000.0, now=400.0, after=100.0) == (500.0, False)
    assert training_limit(deadline=1000.0, now=950.0, after=100.0) == (MIN_TRAINING_S, True)  # already late: runs over


def test_max_time_is_read_by_lightning_as_the_same_seconds():
    assert max_time(3725.4) == "00:01:02:05"
    assert Timer(duration=max_time(3725.4))._duration == 3725
    assert Timer(duration=max_time(2 * 86400 + 5))._duration == 2 * 86400 + 5
    assert max_time(0.2) == "00:00:00:01"  # a limit of nothing would be no limit at all


def test_a_training_stopped_by_max_time_keeps_its_checkpoint_and_says_the_step_it_reached(tiny_synth, tmp_path):
    root = tmp_path / "runs"
    config = tiny_speech_config(trainer={"max_steps": 100_000, "logger": None, "default_root_dir": str(root)})
    config["data"]["data_dir"] = str(tiny_synth)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    assert speech_main(["fit", "--config", str(path), "--trainer.max_time", max_time(3)]) == 0
    run = next(root.glob("version_*"))
    said = reached(run, str(path))
    assert said["max_steps"] == 100_000 and 1 <= said["steps"] < 100_000
    assert Path(run / "checkpoints" / "last.ckpt").is_file()
