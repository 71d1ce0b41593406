"""Odd files a user may hand to ``caption`` and ``transcribe``, all in one battery.

Images: one pixel, 144 megapixels, 16-bit, transparent, animated, a Unicode name, a phone photo
stored sideways with an EXIF orientation, random bytes, a broken link. Audio: 8 kHz, 96 kHz with
6 channels, clipped, 20 minutes, one sample, a Unicode name, a header that lies about the
length, NaN, infinite and absurdly loud samples, random bytes, a broken link, a folder named
``x.wav``. Each file gets either a real result or one error line naming it (exit code 2, the
other files still processed); never a traceback, never a hang. The expectations are those of the
bad-input tests (``test_bad_input.py``); the models are their tiny ones (``tests/helpers.py``), untrained
and exported (no fit needed).
"""

from __future__ import annotations

import json
import os
import re
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from PIL import Image, ImageDraw

from shared import Vocabulary
from shared.io.model_files import export_folder
from show_attend.cli import main as show_attend
from show_attend.data.dataset import CaptionDataset
from show_attend.data.images import ImageError, image_size, image_transform, load_image
from show_attend.data.readers import CaptionRecord
from show_attend.infer.caption import CaptionResult, save_overlay
from show_attend.train.module import CaptionerModule
from speech_attend.cli import main as speech_attend
from speech_attend.data.audio import AudioError, load_audio
from speech_attend.data.dataset import SpeechDataset, collate
from speech_attend.data.readers import Utterance
from speech_attend.model.features import FeatureConfig, FeatureFrontend
from speech_attend.model.las import build_recognizer
from tests.helpers import CAPTION_MODEL, TINY_SPEECH_CONFIG, one_line_error, tone

WORKS = None  # expectation of a file that gives a real result; otherwise a pattern its error line must match
RATE = 16000


# ----------------------------------------------------------------------------- models


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """The tiny captioner and recognizer of the bad-input tests, untrained, exported as folders."""
    folder = tmp_path_factory.mktemp("odd_models")
    torch.manual_seed(0)
    captioner = CaptionerModule(["a", "red", "blue", "circle", "square", "left", "of"], image_size=32, **CAPTION_MODEL)
    export_folder(folder / "captioner", "show-attend", captioner.model.state_dict(), dict(captioner.hparams))
    config = {key: TINY_SPEECH_CONFIG["model"][key] for key in ("las", "decoding")}
    config["vocabulary"] = list("abcdefghijklmnopqrstuvwxyz '")
    recognizer = build_recognizer(config)
    export_folder(folder / "recognizer", "speech-attend", recognizer.state_dict(), config)
    return {"captioner": folder / "captioner", "recognizer": folder / "recognizer"}


# ----------------------------------------------------------------------------- odd files


def _sideways_photo(path: Path) -> Path:
    """A red circle left of a blue square (96x48 as shown), stored turned a quarter left with
    EXIF orientation 6, as phone cameras write a photo taken upright."""
    upright = Image.new("RGB", (96, 48), "white")
    draw = ImageDraw.Draw(upright)
    draw.ellipse((8, 8, 40, 40), fill=(255, 0, 0))
    draw.rectangle((56, 8, 88, 40), fill=(0, 0, 255))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: turn a quarter right to show
    upright.transpose(Image.Transpose.ROTATE_90).save(path, exif=exif, quality=95)
    return path


def _wav_claiming_ten_times_its_length(path: Path) -> Path:
    """1 s of 16-bit PCM whose RIFF and data chunk sizes announce 10 s (as a recorder killed
    before it could rewrite its header leaves them)."""
    data = (tone(1.0, RATE) * 32767).astype("<i2").tobytes()
    claimed = 10 * len(data)
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, RATE, 2 * RATE, 2, 16)
    path.write_bytes(b"RIFF" + struct.pack("<I", 36 + claimed) + b"WAVE" + fmt + b"data" + struct.pack("<I", claimed) + data)
    return path


@pytest.fixture(scope="module")
def odd_images(tmp_path_factory) -> dict[Path, str | None]:
    """Image files -> ``WORKS`` or the pattern of their error line."""
    folder = tmp_path_factory.mktemp("odd_images")
    rng = np.random.default_rng(0)
    files: dict[Path, str | None] = {}

    def add(name: str, expected: str | None = WORKS) -> Path:
        files[folder / name] = expected
        return folder / name

    Image.new("RGB", (1, 1), (200, 30, 30)).save(add("one_pixel.png"))
    # 144 megapixels, between Pillow's decompression-bomb warning (89 MP) and its error (179 MP):
    # a real photo size (cameras reach 150 MP), so it is captioned. One palette colour keeps it cheap.
    Image.new("P", (12000, 12000), 0).save(add("144_megapixels.png"))
    Image.fromarray(np.arange(48 * 64, dtype=np.uint16).reshape(48, 64) * 20).save(add("16_bit.png"))
    transparent = Image.new("RGBA", (64, 48), (0, 0, 0, 0))
    ImageDraw.Draw(transparent).ellipse((8, 8, 40, 40), fill=(255, 0, 0, 255))
    transparent.save(add("transparent.png"))
    frames = [Image.new("RGB", (64, 48), colour) for colour in ("red", "green", "blue")]
    frames[0].save(add("animated.gif"), save_all=True, append_images=frames[1:], duration=100, loop=0)
    Image.new("RGB", (64, 48), "green").save(add("café 日本の写真.png"))
    _sideways_photo(add("sideways_phone_photo.jpg"))
    add("random_bytes.png", "not a readable image").write_bytes(rng.bytes(4096))
    os.symlink(folder / "gone" / "photo.png", add("broken_link.png", "a broken link"))
    return files


@pytest.fixture(scope="module")
def odd_audio(tmp_path_factory) -> dict[Path, str | None]:
    """Audio files (and one folder) -> ``WORKS`` or the pattern of their error line."""
    folder = tmp_path_factory.mktemp("odd_audio")
    rng = np.random.default_rng(0)
    files: dict[Path, str | None] = {}

    def add(name: str, expected: str | None = WORKS) -> Path:
        files[folder / name] = expected
        return folder / name

    sf.write(add("8_khz.wav"), tone(1.0, 8000), 8000)
    sf.write(add("96_khz_6_channels.wav"), tone(1.0, 96000, channels=6), 96000)
    sf.write(add("clipped.wav"), np.clip(10 * tone(1.0, RATE), -1, 1), RATE, subtype="PCM_16")
    twenty_minutes = np.zeros(20 * 60 * RATE)  # silence with a second of tone every 4 minutes
    for minute in range(0, 20, 4):
        twenty_minutes[minute * 60 * RATE : (minute * 60 + 1) * RATE] = tone(1.0, RATE)
    sf.write(add("20_minutes.flac"), twenty_minutes, RATE)
    sf.write(add("one_sample.wav", "shorter than one listener frame"), np.zeros(1), RATE)
    sf.write(add("録音 café.wav"), tone(1.0, RATE), RATE)
    _wav_claiming_ten_times_its_length(add("header_claims_10_s.wav"))  # read as the 1 s it holds
    all_nan = np.full(RATE, np.nan, np.float32)
    sf.write(add("all_nan.wav", f"{RATE} of {RATE} samples are NaN or infinite"), all_nan, RATE, subtype="FLOAT")
    for name, bad in (("100_nan.wav", np.nan), ("100_inf.wav", np.inf)):
        wave = tone(1.0, RATE).astype(np.float32)
        wave[5000:5100] = bad
        sf.write(add(name, f"100 of {RATE} samples are NaN or infinite"), wave, RATE, subtype="FLOAT")
    loud = (3e4 * tone(1.0, RATE)).astype(np.float32)  # integer sample values written as floats
    sf.write(add("integers_as_floats.wav", "dB over full scale; expected audio in about"), loud, RATE, subtype="FLOAT")
    add("random_bytes.wav", "not a readable audio file").write_bytes(rng.bytes(4096))
    os.symlink(folder / "gone" / "talk.wav", add("broken_link.wav", "a broken link"))
    add("x.wav", "a folder with no audio files").mkdir()
    return files


def _check_one_line_each(files: dict[Path, str | None], results: list[str], err: str, prog: str) -> None:
    """Every file with a real result in order, and one matching error line for every other."""
    assert "Traceback" not in err, err
    assert results == [str(path) for path, expected in files.items() if expected is WORKS]
    errors = [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(errors) == sum(expected is not WORKS for expected in files.values()), err
    for path, expected in files.items():
        if expected is not WORKS:
            (line,) = [line for line in errors if line.startswith(f"{prog}: error: {path}: ")]
            assert re.search(expected, line), line


# ----------------------------------------------------------------------------- the battery


@pytest.mark.timeout(120)
def test_caption_gives_each_odd_image_a_caption_or_one_line_error(models, odd_images, tmp_path, capsys):
    overlays = tmp_path / "overlays"
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = show_attend(
            ["caption", "--ckpt", str(models["captioner"]), "--json", "--overlay-dir", str(overlays), *map(str, odd_images)]
        )
    out, err = capsys.readouterr()
    assert code == 2
    lines = [json.loads(line) for line in out.splitlines()]
    _check_one_line_each(odd_images, [line["image"] for line in lines], err, "show-attend")
    assert all(line["tokens"] and Path(line["overlay"]).is_file() for line in lines)
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]


@pytest.mark.timeout(120)
def test_transcribe_gives_each_odd_audio_file_a_text_or_one_line_error(models, odd_audio, tmp_path, capsys):
    capsys.readouterr()
    code = speech_attend(
        [
            "transcribe",
            "--ckpt",
            str(models["recognizer"]),
            "--json",
            "--alignment-dir",
            str(tmp_path / "alignments"),
            *map(str, odd_audio),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2
    lines = {line["audio"]: line for line in map(json.loads, out.splitlines())}
    _check_one_line_each(odd_audio, list(lines), err, "speech-attend")
    durations = {Path(audio).name: line["duration_s"] for audio, line in lines.items()}
    assert durations["20_minutes.flac"] == 1200.0 and durations["header_claims_10_s.wav"] == 1.0
    assert durations["96_khz_6_channels.wav"] == durations["8_khz.wav"] == 1.0
    assert len(list((tmp_path / "alignments").glob("*.png"))) == len(lines)


def test_an_image_over_pillows_bomb_limit_is_a_one_line_error(models, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow raises past twice this: 2000 pixels
    Image.new("RGB", (40, 40)).save(tmp_path / "large.png")  # 1600 pixels: warned of, read
    Image.new("RGB", (50, 50)).save(tmp_path / "too_large.png")  # 2500 pixels: refused
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        assert load_image(tmp_path / "large.png").size == image_size(tmp_path / "large.png") == (40, 40)
    with pytest.raises(ImageError, match="too_large.png: too large to read safely .*2500 pixels"):
        image_size(tmp_path / "too_large.png")
    capsys.readouterr()
    paths = [str(tmp_path / "too_large.png"), str(tmp_path / "large.png")]
    assert show_attend(["caption", "--ckpt", str(models["captioner"]), "--json", *paths]) == 2
    out, err = capsys.readouterr()
    assert "too large to read safely" in one_line_error(err, "show-attend")
    assert [json.loads(line)["image"] for line in out.splitlines()] == paths[1:]


# ----------------------------------------------------------------------------- a photo with an EXIF orientation


def _red_left_of_blue(pixels: np.ndarray) -> bool:
    """Whether an `(H, W, 3)` or `(3, H, W)` picture has red in its left half and blue in its right."""
    if pixels.shape[0] == 3:
        pixels = pixels.transpose(1, 2, 0)
    half = pixels.shape[1] // 2
    left, right = pixels[:, :half].mean((0, 1)), pixels[:, half:].mean((0, 1))  # (3,) each
    return bool(left[0] > left[2] and right[2] > right[0])


def test_a_photo_with_an_exif_orientation_is_seen_upright_by_every_reader(tmp_path, monkeypatch):
    photo = _sideways_photo(tmp_path / "photo.jpg")
    with Image.open(photo) as stored:
        assert stored.size == (48, 96) and not _red_left_of_blue(np.asarray(stored.convert("RGB")))  # the control
    # caption and the training and evaluation readers: what the model is given
    image = load_image(photo)
    assert image.size == image_size(photo) == (96, 48) and _red_left_of_blue(np.asarray(image))
    assert _red_left_of_blue(image_transform(32)(image).numpy())
    record = CaptionRecord(photo, "test", [["a", "red", "circle", "left", "of", "a", "blue", "square"]])
    vocabulary = Vocabulary.build(record.references)
    item = CaptionDataset([record], vocabulary, image_transform(32), train=False)[0]  # what the feature cache encodes too
    assert item["size"] == (96, 48) and _red_left_of_blue(item["image"].numpy())
    record.objects = [{"box": [8, 8, 40, 40], "words": [1, 2]}]  # pointing accuracy needs the size as shown
    cached = CaptionDataset([record], vocabulary, image_transform(32), train=False, features=np.zeros((1, 4, 2)))[0]
    assert cached["size"] == (96, 48)
    # the overlay is drawn on the upright photo
    drawn = []
    monkeypatch.setattr("shared.evaluation.plots.save_caption_grid", lambda picture, *args: drawn.append(picture))
    save_overlay(CaptionResult(photo, ["a"], torch.rand(1, 4, 4)), tmp_path / "overlay.png")
    assert drawn[0].shape == (48, 96, 3) and _red_left_of_blue(drawn[0])


# ----------------------------------------------------------------------------- audio with NaN or infinite samples


def _utterances(folder: Path, waves: dict[str, np.ndarray]) -> list[Utterance]:
    utterances = []
    for i, (name, wave) in enumerate(waves.items()):
        sf.write(folder / name, wave.astype(np.float32), RATE, subtype="FLOAT")
        utterances.append(Utterance(str(folder / name), "a tone", None, None, f"utt-{i}"))
    return utterances


@pytest.mark.parametrize("cache", [False, True])
def test_training_and_evaluation_readers_skip_audio_with_nan_or_infinite_samples(tmp_path, cache):
    broken = tone(1.0, RATE)
    broken[100:142] = np.nan
    broken[200] = -np.inf
    utterances = _utterances(tmp_path, {"good.wav": tone(1.0, RATE), "broken.wav": broken})
    dataset = SpeechDataset(utterances, RATE, cache=cache)
    batch = collate([dataset[0], dataset[1]])
    assert batch.keys == ["utt-0"] and bool(torch.isfinite(batch.waveforms).all())
    assert [(s.path, s.reason) for s in batch.skipped] == [
        (str(tmp_path / "broken.wav"), f"43 of {RATE} samples are NaN or infinite; expected finite audio samples")
    ]


def test_load_audio_refuses_samples_that_would_overflow_on_the_way_to_the_model(tmp_path):
    sf.write(tmp_path / "loud.wav", np.array([0.5, -2e5, 1.0], np.float32), RATE, subtype="FLOAT")
    with pytest.raises(AudioError, match=r"loud.wav: samples reach 2e\+05, 106 dB over full scale"):
        load_audio(tmp_path / "loud.wav")
    sf.write(tmp_path / "hot.wav", np.array([0.5, -4.0, 1.0], np.float32), RATE, subtype="FLOAT")
    assert load_audio(tmp_path / "hot.wav").abs().max() == 4.0  # past full scale, still read


def test_the_front_end_refuses_waveforms_with_nan_inf_or_overflowing_samples():
    frontend = FeatureFrontend(FeatureConfig()).eval()
    waves = torch.from_numpy(np.stack([tone(0.5, RATE)] * 3)).float()  # (3, N)
    lengths = torch.tensor([8000, 8000, 4000])
    features, _ = frontend(waves, lengths)
    assert bool(torch.isfinite(features).all())
    waves[2, 5000:] = float("nan")  # padding past its length: not read
    assert bool(torch.isfinite(frontend(waves, lengths)[0]).all())
    waves[1, 10], waves[1, 20] = float("nan"), float("inf")
    with pytest.raises(ValueError, match=r"waveforms hold 2 NaN or infinite samples \(batch rows \[1\]\)"):
        frontend(waves, lengths)
    with pytest.raises(ValueError, match=r"samples reach 1e\+20, past 1000; expected audio in about"):
        frontend(torch.full((1, 8000), 1e20), torch.tensor([8000]))
