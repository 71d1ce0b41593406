"""Model files of an older layout load as today's (each app's model/migrations.py): through the
loaders, the faces, ``export``, and a new run's ``--init_from``."""

import json

import pytest
import torch
import yaml

from shared.io.model_files import export_folder, safe_torch_load
from show_attend.cli import main as show_attend
from show_attend.infer.caption import Captioning, load_captioner
from show_attend.model.captioner import DecodeConfig, build_captioner
from show_attend.model.migrations import migrate_hyper_parameters
from speech_attend.cli import main as speech_attend
from speech_attend.model.las import build_recognizer
from tests.helpers import tiny_speech_config

_NETWORK = {
    "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 8, "channels_last": False},
    "decoder": {"embed_dim": 8, "attention_dim": 8, "hidden_dim": 8, "dropout": 0.0},
    "image_size": 32,
}
# As the captioner saved its decoding settings before they had a key of their own: beside the network's.
_BESIDE = {"beam_size": 3, "max_decode_length": 7, "length_penalty": 0.5, "max_repeats": None}
_DECODING = {"beam_size": 3, "max_length": 7, "length_penalty": 0.5, "max_repeats": None}  # the same, today


@pytest.fixture(scope="module")
def old_captioner(tiny_shapes, tmp_path_factory):
    """An untrained captioner over the tiny shapes' words, exported with the older layout."""
    from show_attend.train.datamodule import CaptionDataModule

    words = CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1).vocabulary_tokens
    torch.manual_seed(0)
    model = build_captioner({"vocabulary": words, **_NETWORK})
    hparams = {"vocabulary": words, **_NETWORK, **_BESIDE, "doubly_stochastic": 0.0}
    return export_folder(tmp_path_factory.mktemp("old") / "model", "show-attend", model.state_dict(), hparams)


def test_decoding_settings_saved_beside_the_network_are_read_as_its_decoding():
    current = migrate_hyper_parameters({"vocabulary": ["a"], **_NETWORK, **_BESIDE})
    assert current == {"vocabulary": ["a"], **_NETWORK, "decoding": _DECODING}
    assert migrate_hyper_parameters(current) == current  # today's layout passes unchanged


def test_an_old_captioner_loads_with_its_decoding_settings(old_captioner, tiny_shapes):
    assert load_captioner(old_captioner).decoding == DecodeConfig(**_DECODING)
    assert Captioning.load(old_captioner, beam_size=2).decoding == DecodeConfig(**{**_DECODING, "beam_size": 2})
    image = sorted((tiny_shapes / "images").glob("*.png"))[0]
    assert len(Captioning.load(old_captioner).caption(image).tokens) <= 7


def test_exporting_an_old_captioner_writes_todays_layout(old_captioner, tmp_path):
    assert show_attend(["export", "--ckpt", str(old_captioner), "--out", str(tmp_path / "new")]) == 0
    saved = json.loads((tmp_path / "new" / "config.json").read_text())["hyper_parameters"]
    assert not set(_BESIDE) & set(saved)
    assert saved["decoding"] == _DECODING


def test_a_new_run_from_an_old_captioner_keeps_its_decoding_settings(old_captioner, tiny_shapes, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "trainer": {"accelerator": "cpu", "max_steps": 1, "limit_val_batches": 0, "enable_progress_bar": False},
                "data": {"data_dir": str(tiny_shapes), "image_size": 32, "batch_size": 8, "min_word_freq": 1},
            }
        )
    )
    root = tmp_path / "run"
    args = ["fit", "--config", str(config), "--trainer.default_root_dir", str(root), "--init_from", str(old_captioner)]
    assert show_attend(args) == 0
    saved = safe_torch_load(next(root.rglob("last.ckpt")))["hyper_parameters"]
    assert saved["decoding"] == _DECODING
    assert not set(_BESIDE) & set(saved)


def test_a_new_run_from_a_recognizer_saved_before_the_level_steps_keeps_them_off(tiny_synth, tmp_path):
    config = tiny_speech_config(trainer={"max_steps": 1, "limit_val_batches": 0}, data={"data_dir": str(tiny_synth)})
    hparams = {"vocabulary": list("abcdefghijklmnopqrstuvwxyz' "), **config["model"], "features": {"n_mels": 80}}
    torch.manual_seed(0)
    model = build_recognizer(hparams)
    assert (model.frontend.config.remove_dc, model.frontend.config.level_dbfs) == (False, None)
    export_folder(tmp_path / "old", "speech-attend", model.state_dict(), hparams)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({key: config[key] for key in ("trainer", "data")}))
    root = tmp_path / "run"
    args = ["fit", "--config", str(tmp_path / "tiny.yaml"), "--trainer.default_root_dir", str(root)]
    assert speech_attend([*args, "--init_from", str(tmp_path / "old")]) == 0
    features = safe_torch_load(next(root.rglob("last.ckpt")))["hyper_parameters"]["features"]
    assert (features["remove_dc"], features["level_dbfs"]) == (False, None)
