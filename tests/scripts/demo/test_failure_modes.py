"""scripts/demo/failure_modes.py (and scripts/experiments/faithfulness.py) on tiny untrained models: every example is written, and the mask holds."""

from __future__ import annotations

import json

import torch

from scripts.demo import failure_modes
from scripts.experiments import faithfulness
from shared.io.model_files import export_folder
from show_attend.train.module import CaptionerModule
from speech_attend.model.las import build_recognizer
from tests.helpers import TINY_SPEECH_CONFIG


def test_the_three_examples(tiny_synth, tmp_path):
    torch.manual_seed(0)
    words = [
        "a",
        "big",
        "small",
        "red",
        "green",
        "blue",
        "yellow",
        "purple",
        "orange",
        "white",
        "circle",
        "square",
        "triangle",
        "diamond",
        "left",
        "of",
        "above",
    ]
    captioner = CaptionerModule(
        words,
        encoder={"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
        decoder={"embed_dim": 8, "attention_dim": 8, "hidden_dim": 8},
        image_size=32,
        decoding={"max_length": 6},
    )
    export_folder(tmp_path / "captioner", "show-attend", captioner.model.state_dict(), dict(captioner.hparams))
    hparams = {key: TINY_SPEECH_CONFIG["model"][key] for key in ("las", "decoding")} | {
        "vocabulary": list("abcdefghijklmnopqrstuvwxyz '")
    }
    recognizer = build_recognizer(hparams)
    export_folder(tmp_path / "recognizer", "speech-attend", recognizer.state_dict(), hparams)
    out = tmp_path / "out"
    assert (
        failure_modes.main(
            [
                "--captioner",
                str(tmp_path / "captioner"),
                "--recognizer",
                str(tmp_path / "recognizer"),
                "--data",
                str(tiny_synth),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    results = json.loads((out / "failure_modes.json").read_text())
    identical = results["identical"]
    reference = identical["reference"].split()
    assert reference[1:4] == reference[-3:]  # two objects named alike: "a big red circle ... a big red circle"
    assert all(0 <= w["on_first"] + w["on_second"] <= 1 + 1e-6 for w in identical["words"])
    assert results["longer"]["objects"] == 6 and len(results["longer"]["reference"].split()) > 20
    mask = results["wrong_mask"]
    assert mask["seconds"] < mask["padded_to_seconds"]
    assert mask["mask_right"]["attention_on_padding"] == 0.0  # masked positions get exactly zero weight
    assert mask["mask_dropped"]["attention_on_padding"] > 0.0  # without the mask, softmax gives the padding a share
    for name in ("identical.png", "longer.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_faithfulness_scores_every_word_of_every_image(tiny_shapes, tmp_path, capsys):
    torch.manual_seed(0)
    from show_attend.train.datamodule import CaptionDataModule

    words = CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1).vocabulary_tokens
    captioner = CaptionerModule(
        words,
        encoder={"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
        decoder={"embed_dim": 8, "attention_dim": 8, "hidden_dim": 8},
        image_size=32,
        decoding={"max_length": 6},
    )
    export_folder(tmp_path / "model", "show-attend", captioner.model.state_dict(), dict(captioner.hparams))
    assert (
        faithfulness.main(["--ckpt", f"tiny={tmp_path / 'model'}", "--data", str(tiny_shapes), "--out", str(tmp_path / "out")])
        == 0
    )
    result = json.loads((tmp_path / "out" / "full" / "faithfulness.json").read_text())["tiny"]
    assert result["images"] == 4 and result["words"] > 0
    for key in ("pointing_attention", "pointing_occlusion", "peaks_differ", "attention_peak_in_top3"):
        assert 0.0 <= result[key] <= 1.0
    assert "| tiny |" in capsys.readouterr().out
