"""What a user sees on the terminal: no warnings they cannot act on, no error for a closed pipe.

Each app's commands run in a child program, as a user runs them, with warnings shown as Python
shows them by default. The fit, test and resumed fit of one app share that program, which starts
once: a warning shows the first time its line warns, so one that any of the three would print is
printed there too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.helpers import tiny_speech_config

pytestmark = pytest.mark.slow

# What Lightning and PyTorch print on every run, and the user can do nothing about.
NOISE = (
    "LeafSpec",
    "smaller than the logging interval",
    "not supported by the model summary",
    "tensorboardX",
    "dirpath",
    "weights_only",
    "litlogger",
    "Broken pipe",
)


# A child that runs ``APP.cli main(argv)`` for each argv in turn and stops at the first non-zero code.
_COMMANDS = """
import importlib, json, sys
main = importlib.import_module(sys.argv[1] + ".cli").main
for argv in json.loads(sys.argv[2]):
    code = main(argv)
    if code:
        sys.exit(code)
"""


def _run(app: str, *commands: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _COMMANDS, app, json.dumps(commands)], capture_output=True, text=True, timeout=300
    )


def _assert_quiet(result: subprocess.CompletedProcess) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    found = [noise for noise in NOISE if noise in output]
    assert not found, f"{found} in:\n{output[-3000:]}"


def test_captioner_fit_test_and_resume_print_no_noise(tiny_shapes, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "accelerator": "cpu",
                    "max_steps": 3,
                    "precision": "bf16-mixed",
                    "default_root_dir": str(tmp_path / "run"),
                    "enable_progress_bar": False,
                },
                "model": {
                    "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
                    "decoder": {"embed_dim": 16, "attention_dim": 16, "hidden_dim": 16},
                    "decoding": {"beam_size": 2, "max_length": 6},
                },
                "data": {"data_dir": str(tiny_shapes), "image_size": 32, "batch_size": 8, "min_word_freq": 1},
            }
        )
    )
    _assert_quiet(
        _run(
            "show_attend",
            ["fit", "--config", str(config)],  # 3 steps: fewer than the logging interval
            ["test", "--config", str(config), "--ckpt_path", "last"],
            ["fit", "--config", str(config), "--trainer.max_steps", "4", "--ckpt_path", "last"],
        )
    )


def test_recognizer_fit_test_and_resume_print_no_noise(tiny_synth, tmp_path):
    config = tmp_path / "tiny.yaml"
    speech = tiny_speech_config(
        trainer={"logger": None, "enable_progress_bar": False, "default_root_dir": str(tmp_path / "run")},
        data={"data_dir": str(tiny_synth)},
    )
    speech["checkpoint"] = {"monitor": "val/cer"}
    config.write_text(yaml.safe_dump(speech))
    _assert_quiet(
        _run(
            "speech_attend",
            ["fit", "--config", str(config)],
            ["test", "--config", str(config), "--ckpt_path", "last"],
            ["fit", "--config", str(config), "--trainer.max_steps", "4", "--ckpt_path", "last"],
        )
    )
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "version_0" / "checkpoints").iterdir())
    assert checkpoints == ["best.ckpt", "last.ckpt"]  # stopped mid-epoch at max_steps: no last-v1.ckpt beside last.ckpt


def test_output_into_a_closed_pipe_ends_quietly(tiny_synth, tmp_path):
    files = sorted(str(p) for p in (tiny_synth / "test").rglob("*.flac"))
    from shared.io.model_files import export_folder
    from speech_attend.model.las import build_recognizer
    from tests.helpers import TINY_SPEECH_CONFIG

    hparams = {key: TINY_SPEECH_CONFIG["model"][key] for key in ("las", "decoding")} | {"vocabulary": list("abcdefgh ")}
    model = build_recognizer(hparams)
    export_folder(tmp_path / "model", "speech-attend", model.state_dict(), hparams)
    process = subprocess.Popen(
        [sys.executable, "-m", "speech_attend.cli", "transcribe", "--ckpt", str(tmp_path / "model"), *files * 20],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # as `| head` does once it has read enough
    _, err = process.communicate(timeout=300)
    assert process.returncode == 141, err.decode()  # 128 + SIGPIPE, what a shell reports for `cat file | head`
    assert err.decode() == ""
