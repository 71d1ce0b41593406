"""What the test modules share besides fixtures: tiny model configs, and the helpers of the bad-input
tests (``from tests.helpers import tiny_speech_config, one_line_error``). Fixtures live in conftest.py."""

from __future__ import annotations

import copy
import io
import shutil
from pathlib import Path

import numpy as np
import soundfile as sf
import yaml
from PIL import Image

from show_attend.data.readers import read_karpathy
from speech_attend.model.las import LASConfig

# A LAS of a few thousand parameters that trains a step in well under a second.
TINY_SPEECH_CONFIG = {
    "seed_everything": 0,
    "trainer": {
        "accelerator": "cpu",
        "devices": 1,
        "max_steps": 3,
        "limit_val_batches": 1,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "logger": False,
    },
    "model": {
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
    "data": {"batch_size": 4, "eval_batch_size": 4, "cache_audio": True},
}


def tiny_speech_config(trainer: dict | None = None, data: dict | None = None) -> dict:
    """A fresh copy of :data:`TINY_SPEECH_CONFIG` with ``trainer`` and ``data`` keys overridden
    (a ``None`` value removes a key)."""
    config = copy.deepcopy(TINY_SPEECH_CONFIG)
    for section, changes in (("trainer", trainer), ("data", data)):
        for key, value in (changes or {}).items():
            if value is None:
                config[section].pop(key, None)
            else:
                config[section][key] = value
    return config


# A LAS config of the same size for the recognizer's module, and the characters it spells.
TINY_LAS_CHARS = list("abc ")
TINY_LAS = LASConfig(
    listener_hidden=8,
    pyramid_layers=2,
    speller_hidden=16,
    embedding_dim=8,
    attention_dim=8,
    location_filters=2,
    location_kernel=5,
    dropout=0.0,
    ctc_upsample=2,
)


# ----------------------------------------------------------------------------- bad input: common

LOG_NAME = "skipped_samples.log"


def one_line_error(err: str, prog: str) -> str:
    """The error line in a failed command's stderr; fails unless there is exactly one and no traceback."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(errors) == 1, err
    return errors[0]


def read_skipped_log(log: Path) -> dict[str, str]:
    """``path -> reason`` from a skipped-samples log; every line must have both."""
    lines = log.read_text().splitlines()
    entries = [line.split("\t") for line in lines]
    assert all(len(entry) == 2 and entry[1].strip() for entry in entries), lines
    return dict(entries)


def truncate(path: Path, keep: float = 0.5) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def tone(seconds: float, rate: int, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * 300 * t) * (1 + np.sin(2 * np.pi * 3 * t))
    return np.stack([wave] * channels, axis=1) if channels > 1 else wave


# ----------------------------------------------------------------------------- bad input: the captioner's runs

CAPTION_MODEL = {
    "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
    "decoder": {"embed_dim": 24, "attention_dim": 24, "hidden_dim": 32, "dropout": 0.0},
    "optimizer": {"lr": 0.003},
    "decoding": {"beam_size": 2, "max_length": 8},
}


def caption_config(folder: Path, data_dir: Path) -> Path:
    """A one-epoch fit (24 images, batches of 8) writing into ``folder/run``; the CLI adds its CSV logger."""
    config = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "max_steps": 3,
            "num_sanity_val_steps": 0,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(folder / "run"),
        },
        "model": CAPTION_MODEL,
        "data": {"data_dir": str(data_dir), "image_size": 32, "batch_size": 8, "min_word_freq": 1},
    }
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def shapes_copy(tiny_shapes: Path, folder: Path) -> tuple[Path, list[Path]]:
    """A copy of the tiny_shapes data and its training image paths, in file order."""
    data = shutil.copytree(tiny_shapes, folder / "data")
    records = read_karpathy(data / "dataset_shapes.json", data / "images")
    return data, [r.path for r in records if r.split == "train"]


def as_truncated_jpeg(data: Path, png: Path) -> Path:
    """Replace ``png`` by a JPEG cut in half, renamed in the split file too."""
    jpeg = png.with_suffix(".jpg")
    buffer = io.BytesIO()
    with Image.open(png) as image:
        image.convert("RGB").save(buffer, format="JPEG", quality=95)
    jpeg.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    png.unlink()
    split_file = data / "dataset_shapes.json"
    split_file.write_text(split_file.read_text().replace(f'"{png.name}"', f'"{jpeg.name}"'))
    return jpeg


def unusual_images(paths: list[Path]) -> None:
    """Rewrite four images as greyscale, RGBA, 16-bit and an odd size (all must train)."""
    grey, rgba, deep, odd = paths
    with Image.open(grey) as image:
        image.convert("L").save(grey)
    with Image.open(rgba) as image:
        image.convert("RGBA").save(rgba)
    with Image.open(deep) as image:
        Image.fromarray(np.asarray(image.convert("L"), dtype=np.uint16) * 257).save(deep)
    with Image.open(odd) as image:
        image.resize((97, 23)).save(odd)


# ----------------------------------------------------------------------------- bad input: the recognizer's runs


def speech_config(folder: Path, **data) -> Path:
    config = tiny_speech_config(trainer={"max_steps": 2, "logger": None}, data=data)  # the run layout's CSV logger
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def synth_copy(tiny_synth: Path, folder: Path) -> tuple[Path, dict[str, list[Path]]]:
    """A copy of the corpus and its audio files per split (absolute, as the corpus reader gives them)."""
    corpus = shutil.copytree(tiny_synth, folder / "corpus")
    return corpus, {split: sorted(p.resolve() for p in (corpus / split).rglob("*.flac")) for split in ("train", "dev", "test")}


def rewrite(flac: Path, rate: int, channels: int) -> Path:
    """The same utterance as a WAV at another rate and channel count (LibriSpeech layout takes .wav)."""
    wave, native = sf.read(flac)
    resampled = np.interp(np.arange(int(len(wave) * rate / native)) * native / rate, np.arange(len(wave)), wave)
    wav = flac.with_suffix(".wav")
    sf.write(wav, np.stack([resampled] * channels, 1) if channels > 1 else resampled, rate)
    flac.unlink()
    return wav
