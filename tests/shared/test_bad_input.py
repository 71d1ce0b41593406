"""Bad input, command by command, for both apps.

Training skips an unreadable file, names it in ``skipped_samples.log`` and goes on; too many
unreadable files, or anything else a user can get wrong, end the command with one line
``PROG: error: ...`` that names the file or value, and exit code 2. Audio and images that are
merely unusual (other rates, stereo, silence, ten minutes long; greyscale, RGBA, 16-bit, odd
sizes) must simply work.

Fixtures are tiny: 24 shapes images at 32 px and 8 synthetic utterances, each trained for one
epoch through the real command lines; their checkpoints serve the caption/transcribe tests.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from PIL import Image
from tiny import tiny_speech_config

from show_attend.cli import main as show_attend
from show_attend.data.dataset import collate
from show_attend.data.readers import read_karpathy
from show_attend.train.datamodule import CaptionDataModule
from speech_attend.cli import main as speech_attend
from speech_attend.train.datamodule import SpeechDataModule

LOG_NAME = "skipped_samples.log"


# ----------------------------------------------------------------------------- helpers


def _one_line_error(err: str, prog: str) -> str:
    """The error line in a failed command's stderr; fails unless there is exactly one and no traceback."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(errors) == 1, err
    return errors[0]


def _skipped(log: Path) -> dict[str, str]:
    """``path -> reason`` from a skipped-samples log; every line must have both."""
    lines = log.read_text().splitlines()
    entries = [line.split("\t") for line in lines]
    assert all(len(entry) == 2 and entry[1].strip() for entry in entries), lines
    return dict(entries)


def _truncate(path: Path, keep: float = 0.5) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def _tone(seconds: float, rate: int, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * 300 * t) * (1 + np.sin(2 * np.pi * 3 * t))
    return np.stack([wave] * channels, axis=1) if channels > 1 else wave


# ----------------------------------------------------------------------------- captioner fixtures

CAPTION_MODEL = {
    "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
    "decoder": {"embed_dim": 24, "attention_dim": 24, "hidden_dim": 32, "dropout": 0.0},
    "optimizer": {"lr": 0.003},
    "decoding": {"beam_size": 2, "max_length": 8},
}


def _caption_config(folder: Path, data_dir: Path) -> Path:
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


def _shapes_copy(tiny_shapes: Path, folder: Path) -> tuple[Path, list[Path]]:
    """A copy of the tiny_shapes data and its training image paths, in file order."""
    data = shutil.copytree(tiny_shapes, folder / "data")
    records = read_karpathy(data / "dataset_shapes.json", data / "images")
    return data, [r.path for r in records if r.split == "train"]


def _as_truncated_jpeg(data: Path, png: Path) -> Path:
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


def _unusual_images(paths: list[Path]) -> None:
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


@pytest.fixture(scope="module")
def caption_run(tiny_shapes, tmp_path_factory) -> dict:
    """`show-attend fit` for one epoch on data with three unreadable training images."""
    folder = tmp_path_factory.mktemp("caption_bad")
    data, train = _shapes_copy(tiny_shapes, folder)
    _truncate(train[0])
    train[1].write_text("a text file, not a PNG\n")
    jpeg = _as_truncated_jpeg(data, train[2])
    _unusual_images(train[3:7])
    config = _caption_config(folder, data)
    code = show_attend(["fit", "--config", str(config), "--bad_samples.min_samples", "16", "--bad_samples.max_fraction", "0.25"])
    return {"code": code, "data": data, "config": config, "run": folder / "run", "bad": {str(train[0]), str(train[1]), str(jpeg)}}


# ----------------------------------------------------------------------------- captioner: fit and test


@pytest.mark.slow
def test_captioner_fit_skips_and_logs_unreadable_images_and_saves_a_checkpoint(caption_run):
    assert caption_run["code"] == 0
    logs = list(caption_run["run"].rglob(LOG_NAME))
    assert [p.relative_to(caption_run["run"]).parts[:1] for p in logs] == [("version_0",)]
    skipped = _skipped(logs[0])
    assert set(skipped) == caption_run["bad"] and len(logs[0].read_text().splitlines()) == 3  # one epoch: once each
    assert all("not a readable image" in reason for reason in skipped.values())
    checkpoint = torch.load(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 3


@pytest.mark.slow
def test_captioner_fit_with_too_many_unreadable_images_stops_in_one_line(tiny_shapes, tmp_path, capsys):
    data, train = _shapes_copy(tiny_shapes, tmp_path)
    for i, path in enumerate(train[:12]):  # half the training set: empty, missing, text, truncated
        [lambda p: p.write_bytes(b""), Path.unlink, lambda p: p.write_text("text\n"), _truncate][i % 4](path)
    config = _caption_config(tmp_path, data)
    capsys.readouterr()
    assert show_attend(["fit", "--config", str(config), "--bad_samples.min_samples", "16"]) == 2
    error = _one_line_error(capsys.readouterr().err, "show-attend")
    log = tmp_path / "run" / "version_0" / LOG_NAME
    assert "more than the limit of 1.0%" in error and str(log) in error
    skipped = _skipped(log)
    assert skipped and set(skipped) <= {str(p) for p in train[:12]}


@pytest.mark.slow
def test_captioner_test_leaves_out_an_unreadable_test_image_and_logs_it(caption_run, tmp_path):
    data = shutil.copytree(caption_run["data"], tmp_path / "data")
    test_images = [r.path for r in read_karpathy(data / "dataset_shapes.json", data / "images") if r.split == "test"]
    _truncate(test_images[0])
    out = tmp_path / "run"
    args = [
        "test",
        "--config",
        str(caption_run["config"]),
        "--data.data_dir",
        str(data),
        "--trainer.default_root_dir",
        str(out),
        "--ckpt_path",
        str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"),
    ]
    with pytest.warns(UserWarning, match="1 test sample"):
        assert show_attend(args) == 0
    assert json.loads((out / "version_0" / "test_metrics.json").read_text())["items"] == 3
    (log,) = out.rglob(LOG_NAME)
    assert log.read_text().startswith(f"[test] {test_images[0]}\t")


def test_feature_cache_skips_an_unreadable_image_now_and_when_reused(tiny_shapes, tmp_path):
    data, train = _shapes_copy(tiny_shapes, tmp_path)
    _truncate(train[5])

    class Encode(torch.nn.Module):  # (B, 3, 32, 32) -> (B, 16, 3): a stand-in frozen encoder
        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.avg_pool2d(images, 8).flatten(2).transpose(1, 2)

    cache = tmp_path / "cache"
    for attempt in ("write", "reuse"):
        datamodule = CaptionDataModule(str(data), image_size=32, batch_size=8, min_word_freq=1, feature_cache=str(cache))
        datamodule.use_encoder(Encode())
        dataset = datamodule.dataset("train")
        bad = dataset[5]
        assert bad.path == str(train[5]) and "not a readable image" in bad.reason, attempt
        batch = collate([dataset[i] for i in range(8)])
        assert batch["batch_size"] == 7 and batch["features"].shape == (7, 16, 3)
        assert [s.path for s in batch["skipped"]] == [str(train[5])]
    assert len(list(cache.glob("train-*.npy"))) == 1  # reused, not rebuilt


@pytest.mark.slow
def test_captioner_fit_with_a_feature_cache_skips_and_logs_an_unreadable_image(tiny_shapes, tmp_path):
    data, train = _shapes_copy(tiny_shapes, tmp_path)
    train[0].write_text("a text file, not a PNG\n")
    config = _caption_config(tmp_path, data)
    frozen = ["--model.encoder.backbone", "vgg16", "--model.encoder.pretrained", "false", "--model.encoder.grid_size", "2"]
    args = [
        "fit",
        "--config",
        str(config),
        *frozen,
        "--data.feature_cache",
        str(tmp_path / "cache"),
        "--bad_samples.min_samples",
        "16",
        "--bad_samples.max_fraction",
        "0.25",
    ]
    assert show_attend(args) == 0
    assert len(list((tmp_path / "cache").glob("train-*.npy"))) == 1
    skipped = _skipped(tmp_path / "run" / "version_0" / LOG_NAME)
    assert list(skipped) == [str(train[0])] and "not a readable image" in skipped[str(train[0])]


@pytest.mark.parametrize("case", ["not json", "entry without sentences", "missing folder"])
def test_captioner_fit_with_a_malformed_split_file_names_the_line_or_entry(tmp_path, capsys, case):
    data = tmp_path / "data"
    data.mkdir()
    good = {"filename": "a.png", "split": "train", "sentences": [{"tokens": ["a", "red", "circle"]}]}
    expected = {"not json": "line 3", "entry without sentences": r"images[1] (b.png)", "missing folder": "data folder not found"}[
        case
    ]
    if case == "not json":
        (data / "dataset_x.json").write_text('{"images": [\n  {"filename": "a.png"},\n  oops\n]}\n')
    elif case == "entry without sentences":
        (data / "dataset_x.json").write_text(json.dumps({"images": [good, {"filename": "b.png", "split": "train"}]}))
    else:
        data = tmp_path / "absent"
    config = _caption_config(tmp_path, data)
    assert show_attend(["fit", "--config", str(config)]) == 2
    error = _one_line_error(capsys.readouterr().err, "show-attend")
    assert expected in error and str(data) in error


def test_captioner_maps_rare_and_unseen_words_to_unk_but_scores_against_the_real_words(tiny_shapes, tmp_path):
    data, _ = _shapes_copy(tiny_shapes, tmp_path)
    split_file = data / "dataset_shapes.json"
    content = json.loads(split_file.read_text())
    for entry in content["images"]:
        if entry["split"] in ("train", "val"):
            entry["sentences"] = [{"tokens": ["a", "red", "circle"]}]
    content["images"][0]["sentences"] = [{"tokens": ["a", "zebra"]}]  # one training use: below min_word_freq 2
    val = next(i for i, e in enumerate(content["images"]) if e["split"] == "val")
    content["images"][val]["sentences"] = [{"tokens": ["a", "unicorn"]}]  # never seen in training
    split_file.write_text(json.dumps(content))
    datamodule = CaptionDataModule(str(data), image_size=32, min_word_freq=2)
    vocabulary = datamodule.vocabulary
    assert "zebra" not in vocabulary.stoi and "unicorn" not in vocabulary.stoi
    train_item = datamodule.dataset("train")[0]
    assert train_item["caption"].tolist() == [vocabulary.sos_id, vocabulary.stoi["a"], vocabulary.unk_id, vocabulary.eos_id]
    val_item = datamodule.dataset("val")[0]
    assert vocabulary.unk_id in val_item["caption"].tolist()
    assert val_item["references"] == ["a unicorn"]  # metrics compare against the words, not <unk>


# ----------------------------------------------------------------------------- captioner: caption and export


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["empty", "truncated png", "truncated jpeg"])
def test_caption_of_an_empty_or_truncated_image_is_a_one_line_error(caption_run, tiny_shapes, tmp_path, capsys, kind):
    source = sorted((tiny_shapes / "images").glob("*.png"))[0]
    if kind == "empty":
        image = tmp_path / "empty.png"
        image.write_bytes(b"")
    elif kind == "truncated png":
        image = _truncate(Path(shutil.copy(source, tmp_path / "cut.png")))
    else:
        image = tmp_path / "cut.jpg"
        with Image.open(source) as picture:
            picture.convert("RGB").save(image, quality=95)
        _truncate(image)
    capsys.readouterr()
    assert (
        show_attend(["caption", "--ckpt", str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"), str(image)]) == 2
    )
    error = _one_line_error(capsys.readouterr().err, "show-attend")
    assert str(image) in error and "image" in error


@pytest.mark.slow
def test_caption_reads_greyscale_rgba_16_bit_palette_and_odd_sizes(caption_run, tiny_shapes, tmp_path, capsys):
    with Image.open(sorted((tiny_shapes / "images").glob("*.png"))[0]) as image:
        rgb = image.convert("RGB")
    images = {
        "grey.png": rgb.convert("L"),
        "rgba.png": rgb.convert("RGBA"),
        "deep.png": Image.fromarray(np.asarray(rgb.convert("L"), dtype=np.uint16) * 257),
        "palette.gif": rgb.convert("P"),
        "tiny.png": rgb.resize((3, 2)),
        "wide.jpg": rgb.resize((640, 20)),
        "cmyk.jpg": rgb.convert("CMYK"),
    }
    paths = []
    for name, picture in images.items():
        picture.save(tmp_path / name)
        paths.append(str(tmp_path / name))
    capsys.readouterr()
    assert (
        show_attend(["caption", "--ckpt", str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"), "--json", *paths])
        == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["image"] for line in lines] == paths


@pytest.mark.parametrize(
    "prog, command",
    [
        ("show-attend", "export"),
        ("show-attend", "caption"),
        ("speech-attend", "export"),
        ("speech-attend", "transcribe"),
    ],
)
@pytest.mark.parametrize("kind", ["missing", "empty", "text"])
def test_a_missing_empty_or_foreign_checkpoint_is_a_one_line_error(tmp_path, capsys, prog, command, kind):
    checkpoint = tmp_path / "model.ckpt"
    if kind != "missing":
        checkpoint.write_bytes(b"" if kind == "empty" else b"a text file, not a checkpoint\n")
    rest = ["--out", str(tmp_path / "out")] if command == "export" else [str(tmp_path / "input.png")]
    app = show_attend if prog == "show-attend" else speech_attend
    assert app([command, "--ckpt", str(checkpoint), *rest]) == 2
    assert str(checkpoint) in _one_line_error(capsys.readouterr().err, prog)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "prog, option, value",
    [
        ("show-attend", "--beam-size", "0"),
        ("show-attend", "--max-length", "0"),
        ("speech-attend", "--beam-size", "0"),
        ("speech-attend", "--max-chunk-seconds", "0"),
        ("speech-attend", "--max-chunk-seconds", "-3"),
    ],
)
def test_an_out_of_range_option_is_a_one_line_error_naming_it(caption_run, speech_run, tmp_path, capsys, prog, option, value):
    if prog == "show-attend":
        code = show_attend(
            ["caption", "--ckpt", str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"), option, value, "x.png"]
        )
    else:
        code = speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), option, value, "x.wav"])
    assert code == 2
    assert f"{option} must be" in _one_line_error(capsys.readouterr().err, prog)


def test_caption_and_transcribe_take_folders_and_name_a_folder_without_inputs(
    caption_run, speech_run, tiny_shapes, tiny_synth, tmp_path, capsys
):
    images = sorted((tiny_shapes / "images").glob("*.png"))[:3]
    folder = tmp_path / "photos"
    (folder / "b").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    shutil.copy(images[0], folder / "b" / "z.png")
    shutil.copy(images[1], folder / "a.PNG")
    (folder / "notes.txt").write_text("not an image")
    capsys.readouterr()
    code = show_attend(
        [
            "caption",
            "--ckpt",
            str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"),
            "--json",
            str(folder),
            str(tmp_path / "empty"),
            str(images[2]),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2  # the folder without images
    assert [json.loads(line)["image"] for line in out.splitlines()] == [
        str(folder / "a.PNG"),
        str(folder / "b" / "z.png"),
        str(images[2]),
    ]
    assert f"{tmp_path / 'empty'}: a folder with no image files" in _one_line_error(err, "show-attend")

    audio = tmp_path / "recordings"
    audio.mkdir()
    for path in sorted((tiny_synth / "test").rglob("*.flac"))[:2]:
        shutil.copy(path, audio / path.name)
    code = speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(audio), str(tmp_path / "empty")])
    out, err = capsys.readouterr()
    assert code == 2
    assert [json.loads(line)["audio"] for line in out.splitlines()] == sorted(str(p) for p in audio.glob("*.flac"))
    assert f"{tmp_path / 'empty'}: a folder with no audio files" in _one_line_error(err, "speech-attend")


def test_an_os_error_reads_path_then_reason(caption_run, tmp_path, capsys):
    taken = tmp_path / "out"
    taken.write_text("a file where the export folder should go")
    assert (
        show_attend(
            ["export", "--ckpt", str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"), "--out", str(taken)]
        )
        == 2
    )
    assert _one_line_error(capsys.readouterr().err, "show-attend") == f"show-attend: error: {taken}: file exists"


def test_the_other_apps_checkpoint_is_named_as_such(caption_run, speech_run, tmp_path, capsys):
    captioner = caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"
    assert speech_attend(["transcribe", "--ckpt", str(captioner), str(tmp_path / "input.wav")]) == 2
    assert "a show-attend (captioner) model; transcribe needs a speech-attend model" in _one_line_error(
        capsys.readouterr().err, "speech-attend"
    )
    assert show_attend(["caption", "--ckpt", str(speech_run["ckpt"]), str(tmp_path / "input.png")]) == 2
    assert "a speech-attend (recognizer) model; caption needs a show-attend model" in _one_line_error(
        capsys.readouterr().err, "show-attend"
    )


@pytest.mark.parametrize(
    "prog, args, expected",
    [
        ("show-attend", ["shapes", "--train", "-1"], "non-negative"),
        ("show-attend", ["shapes", "--train", "0", "--val", "0", "--test", "0"], "nothing to generate"),
        ("speech-attend", ["synth", "--train", "-1"], "utterance counts must be >= 0"),
    ],
)
def test_prepare_with_bad_counts_is_a_one_line_error(tmp_path, capsys, prog, args, expected):
    app = show_attend if prog == "show-attend" else speech_attend
    assert app(["prepare", *args, "--out", str(tmp_path / "out")]) == 2
    assert expected in _one_line_error(capsys.readouterr().err, prog)


@pytest.mark.parametrize(
    "prog, args",
    [
        ("show-attend", ["shapes", "--quiet"]),
        ("speech-attend", ["synth", "--train", "1", "--dev", "0", "--test", "0"]),
    ],
)
def test_prepare_into_a_path_that_is_a_file_is_a_one_line_error(tmp_path, capsys, prog, args):
    out = tmp_path / "file.txt"
    out.write_text("already here\n")
    app = show_attend if prog == "show-attend" else speech_attend
    assert app(["prepare", *args, "--out", str(out)]) == 2
    assert str(out) in _one_line_error(capsys.readouterr().err, prog)


# ----------------------------------------------------------------------------- recognizer fixtures


def _speech_config(folder: Path, **data) -> Path:
    config = tiny_speech_config(trainer={"max_steps": 2, "logger": None}, data=data)  # the run layout's CSV logger
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _synth_copy(tiny_synth: Path, folder: Path) -> tuple[Path, dict[str, list[Path]]]:
    """A copy of the corpus and its audio files per split (absolute, as the corpus reader gives them)."""
    corpus = shutil.copytree(tiny_synth, folder / "corpus")
    return corpus, {split: sorted(p.resolve() for p in (corpus / split).rglob("*.flac")) for split in ("train", "dev", "test")}


def _rewrite(flac: Path, rate: int, channels: int) -> Path:
    """The same utterance as a WAV at another rate and channel count (LibriSpeech layout takes .wav)."""
    wave, native = sf.read(flac)
    resampled = np.interp(np.arange(int(len(wave) * rate / native)) * native / rate, np.arange(len(wave)), wave)
    wav = flac.with_suffix(".wav")
    sf.write(wav, np.stack([resampled] * channels, 1) if channels > 1 else resampled, rate)
    flac.unlink()
    return wav


@pytest.fixture(scope="module")
def speech_run(tiny_synth, tmp_path_factory) -> dict:
    """`speech-attend fit` for one epoch (2 batches of 4) on 8 utterances, two of them unreadable
    and three at other rates and channel counts."""
    folder = tmp_path_factory.mktemp("speech_bad")
    corpus, files = _synth_copy(tiny_synth, folder)
    train = files["train"]
    _truncate(train[0])
    train[1].write_bytes(b"")
    _rewrite(train[2], 48000, 2)
    _rewrite(train[3], 8000, 1)
    _rewrite(train[4], 44100, 2)
    config = _speech_config(folder)
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


# ----------------------------------------------------------------------------- recognizer: fit and test


@pytest.mark.slow
def test_recognizer_fit_skips_and_logs_unreadable_audio_and_saves_a_checkpoint(speech_run):
    assert speech_run["code"] == 0
    logs = list(speech_run["run"].rglob(LOG_NAME))
    assert [p.relative_to(speech_run["run"]).parts[:1] for p in logs] == [("version_0",)]
    skipped = _skipped(logs[0])
    assert set(skipped) == set(speech_run["bad"]) and len(logs[0].read_text().splitlines()) == 2
    for path, reason in speech_run["bad"].items():
        assert re.search(reason, skipped[path]), skipped[path]
    checkpoint = torch.load(speech_run["ckpt"], map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 2


@pytest.mark.slow
def test_recognizer_fit_with_too_many_unreadable_files_stops_in_one_line(tiny_synth, tmp_path, capsys):
    corpus, files = _synth_copy(tiny_synth, tmp_path)
    for i, path in enumerate(files["train"][:4]):  # half: truncated, empty, text, and audio cut to its header
        [_truncate, lambda p: p.write_bytes(b""), lambda p: p.write_text("text\n"), lambda p: _truncate(p, 0.02)][i](path)
    config = _speech_config(tmp_path, cache_audio=False)  # files are read in the loader, not at set-up
    run = tmp_path / "run"
    capsys.readouterr()
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
            "4",
        ]
    )
    assert code == 2
    error = _one_line_error(capsys.readouterr().err, "speech-attend")
    (log,) = run.rglob(LOG_NAME)
    assert "more than the limit of 1.0%" in error and str(log) in error
    assert set(_skipped(log)) <= {str(p) for p in files["train"][:4]}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["text", "zero samples", "shorter than one listener frame"])
def test_recognizer_test_leaves_out_an_unusable_test_file_and_logs_it(speech_run, tiny_synth, tmp_path, kind):
    corpus, files = _synth_copy(tiny_synth, tmp_path)
    if kind == "text":
        files["test"][0].write_text("not audio\n")
    else:
        sf.write(files["test"][0], _tone(0.0 if kind == "zero samples" else 0.02, 16000), 16000)
    out = tmp_path / "run"
    args = [
        "test",
        "--config",
        str(speech_run["config"]),
        "--data.data_dir",
        str(corpus),
        "--trainer.default_root_dir",
        str(out),
        "--ckpt_path",
        str(speech_run["ckpt"]),
    ]
    with pytest.warns(UserWarning, match="1 test sample"):
        assert speech_attend(args) == 0
    assert json.loads(next(out.rglob("test_metrics.json")).read_text())["items"] == 1
    (log,) = out.rglob(LOG_NAME)
    assert log.read_text().startswith(f"[test] {files['test'][0]}\t")


@pytest.mark.parametrize(
    "case, where",
    [
        ("bad json line", "train.jsonl:2"),
        ("missing text", "train.jsonl:2"),
        ("csv with an extra field", "dev.csv:3"),
        ("missing folder", "absent"),
    ],
)
def test_recognizer_fit_with_a_malformed_manifest_names_the_file_and_line(tmp_path, capsys, case, where):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sf.write(corpus / "a.wav", _tone(0.5, 16000), 16000)
    good = json.dumps({"audio": "a.wav", "text": "a tone"})
    train = {"bad json line": good + "\n{not json\n", "missing text": good + "\n" + json.dumps({"audio": "a.wav"}) + "\n"}
    (corpus / "train.jsonl").write_text(train.get(case, good + "\n"))
    (corpus / "dev.csv").write_text("audio,text\na.wav,fine\n" + ("a.wav,too,many\n" if case.startswith("csv") else ""))
    if case == "missing folder":
        corpus = tmp_path / "absent"
    config = _speech_config(tmp_path)
    assert (
        speech_attend(
            ["fit", "--config", str(config), "--data.data_dir", str(corpus), "--trainer.default_root_dir", str(tmp_path / "run")]
        )
        == 2
    )
    assert where in _one_line_error(capsys.readouterr().err, "speech-attend")


@pytest.mark.parametrize("kind", ["missing", "empty", "text"])
def test_recognizer_test_with_a_bad_checkpoint_is_a_one_line_error(tiny_synth, tmp_path, capsys, kind):
    checkpoint = tmp_path / "model.ckpt"
    if kind != "missing":
        checkpoint.write_bytes(b"" if kind == "empty" else b"a text file, not a checkpoint\n")
    config = _speech_config(tmp_path)
    code = speech_attend(
        [
            "test",
            "--config",
            str(config),
            "--data.data_dir",
            str(tiny_synth),
            "--trainer.default_root_dir",
            str(tmp_path / "run"),
            "--ckpt_path",
            str(checkpoint),
        ]
    )
    assert code == 2
    assert "model.ckpt" in _one_line_error(capsys.readouterr().err, "speech-attend")


@pytest.mark.parametrize("kind", ["missing", "empty", "text"])
def test_captioner_test_with_a_bad_checkpoint_is_a_one_line_error(tiny_shapes, tmp_path, capsys, kind):
    checkpoint = tmp_path / "model.ckpt"
    if kind != "missing":
        checkpoint.write_bytes(b"" if kind == "empty" else b"a text file, not a checkpoint\n")
    config = _caption_config(tmp_path, tiny_shapes)
    assert show_attend(["test", "--config", str(config), "--ckpt_path", str(checkpoint)]) == 2
    assert "model.ckpt" in _one_line_error(capsys.readouterr().err, "show-attend")


# ----------------------------------------------------------------------------- recognizer: out-of-vocabulary transcripts


def _manifest_corpus(root: Path, train: list[str], dev: list[str]) -> Path:
    root.mkdir()
    sf.write(root / "a.wav", _tone(0.5, 16000), 16000)
    for split, texts in (("train", train), ("dev", dev)):
        lines = [json.dumps({"audio": "a.wav", "text": text, "id": f"{split}-{i}"}) for i, text in enumerate(texts)]
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_out_of_vocabulary_characters_are_dropped_with_one_warning(tmp_path):
    corpus = _manifest_corpus(tmp_path / "corpus", ["the cat", "a hat"], ["The café", "2 cats", "the hat"])
    datamodule = SpeechDataModule(str(corpus))
    with pytest.warns(UserWarning) as warned:
        datamodule.setup("fit")
    messages = [str(w.message) for w in warned if "outside the vocabulary" in str(w.message)]
    assert messages == [
        "2 of 3 dev transcripts have characters outside the vocabulary of the training text "
        "('2', 'f', 's', 'é'); those characters were dropped (data.oov_policy: drop)"
    ]
    assert datamodule.datasets["val"].texts == ["the ca", "cat", "the hat"]
    assert datamodule.datasets["train"].texts == ["the cat", "a hat"]


def test_out_of_vocabulary_characters_under_the_error_policy_name_the_utterance(tmp_path):
    corpus = _manifest_corpus(tmp_path / "corpus", ["the cat", "a hat"], ["the hat", "The café"])
    with pytest.raises(ValueError) as error:
        SpeechDataModule(str(corpus), oov_policy="error").setup("fit")
    message = str(error.value)
    assert "\n" not in message and message.startswith(str((corpus / "a.wav").resolve()))
    assert "dev-1" in message and "'f', 'é'" in message
    with pytest.raises(ValueError, match="oov_policy must be one of drop, error, got 'replace'"):
        SpeechDataModule(str(corpus), oov_policy="replace")


def test_training_leaves_out_audio_with_no_samples_or_shorter_than_min_duration(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, seconds in (("ok.wav", 0.5), ("no_samples.wav", 0.0), ("blip.wav", 0.02)):
        sf.write(corpus / name, _tone(seconds, 16000), 16000)
    lines = [json.dumps({"audio": name, "text": "a tone"}) for name in ("ok.wav", "no_samples.wav", "blip.wav")]
    for split in ("train", "dev"):
        (corpus / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    datamodule = SpeechDataModule(str(corpus), min_duration=0.1)
    datamodule.setup("fit")
    assert [Path(u.audio_path).name for u in datamodule.datasets["train"].utterances] == ["ok.wav"]
    assert len(datamodule.datasets["val"]) == 3  # evaluation keeps every utterance; unreadable ones are skipped per batch


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["drop", "error"])
def test_recognizer_test_applies_the_policy_with_the_checkpoint_vocabulary(speech_run, tiny_synth, tmp_path, capsys, policy):
    corpus, _ = _synth_copy(tiny_synth, tmp_path)
    spoken = [
        line.split(" ", 1)[1] for t in sorted((corpus / "train").rglob("*.trans.txt")) for line in t.read_text().splitlines()
    ]
    transcripts = sorted((corpus / "test").rglob("*.trans.txt"))
    ids = [line.split()[0] for t in transcripts for line in t.read_text().splitlines()]
    for transcript in transcripts:  # test texts taken from the training text, so only the added characters are new
        lines = [line.split()[0] for line in transcript.read_text().splitlines()]
        lines = [f"{u} {spoken[ids.index(u)]}{' É 42' if u == ids[0] else ''}" for u in lines]
        transcript.write_text("\n".join(lines) + "\n")
    first = ids[0]
    out = tmp_path / "run"
    args = [
        "test",
        "--config",
        str(speech_run["config"]),
        "--data.data_dir",
        str(corpus),
        "--data.oov_policy",
        policy,
        "--trainer.default_root_dir",
        str(out),
        "--ckpt_path",
        str(speech_run["ckpt"]),
    ]
    if policy == "drop":
        with pytest.warns(UserWarning, match=r"^1 of 2 test transcripts .*\('2', '4', 'é'\); those characters were dropped"):
            assert speech_attend(args) == 0
        assert json.loads(next(out.rglob("test_metrics.json")).read_text())["items"] == 2
    else:
        capsys.readouterr()
        assert speech_attend(args) == 2
        error = _one_line_error(capsys.readouterr().err, "speech-attend")
        assert first in error and "'2', '4', 'é'" in error


# ----------------------------------------------------------------------------- recognizer: transcribe


def _short_or_bad_audio(tmp_path: Path, kind: str, tiny_synth: Path) -> Path:
    path = tmp_path / ("speech.flac" if kind == "truncated flac" else "speech.wav")
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated flac":
        shutil.copy(sorted((tiny_synth / "test").rglob("*.flac"))[0], path)
        _truncate(path)
    elif kind == "zero samples":
        sf.write(path, np.zeros(0, np.float32), 16000)
    elif kind == "shorter than one listener frame":
        sf.write(path, _tone(0.02, 16000), 16000)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["empty", "truncated flac", "zero samples", "shorter than one listener frame"])
def test_transcribe_of_unusable_audio_is_one_line_and_the_other_files_still_run(speech_run, tiny_synth, tmp_path, capsys, kind):
    bad = _short_or_bad_audio(tmp_path, kind, tiny_synth)
    good = sorted((tiny_synth / "test").rglob("*.flac"))[0]
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(bad), str(good)]) == 2
    captured = capsys.readouterr()
    assert str(bad) in _one_line_error(captured.err, "speech-attend")
    assert [json.loads(line)["audio"] for line in captured.out.splitlines()] == [str(good)]


@pytest.mark.slow
@pytest.mark.parametrize("rate, channels", [(8000, 1), (44100, 1), (48000, 1), (16000, 2), (48000, 2)])
def test_transcribe_reads_other_rates_and_stereo(speech_run, tmp_path, capsys, rate, channels):
    path = tmp_path / f"tone_{rate}_{channels}.wav"
    sf.write(path, _tone(1.5, rate, channels), rate)
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["audio"] == str(path) and result["duration_s"] == pytest.approx(1.5, abs=1e-3)


@pytest.mark.slow
def test_transcribe_of_silence_gives_a_line_and_no_error(speech_run, tmp_path, capsys):
    path = tmp_path / "silence.flac"
    sf.write(path, np.zeros(32000), 16000)
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {k: result[k] for k in ("audio", "text", "duration_s", "chunks")} == {
        "audio": str(path),
        "text": "",
        "duration_s": 2.0,
        "chunks": 1,
    }
    assert [(s["no_speech"], s["words"]) for s in result["segments"]] == [(True, [])]


def test_only_chunks_with_sound_are_decoded(speech_run, tiny_synth, tmp_path):
    from speech_attend.infer.transcribe import Transcriber

    speech, rate = sf.read(sorted((tiny_synth / "test").rglob("*.flac"))[0])
    quiet_room = np.random.default_rng(0).normal(0, 10 ** (-65 / 20), 20 * rate)  # -65 dBFS of noise
    path = tmp_path / "speech_then_silence.flac"
    sf.write(path, np.concatenate([speech, quiet_room]), rate)
    transcriber = Transcriber.load(speech_run["ckpt"], max_chunk_seconds=4)
    decoded, decode = [], transcriber.model.decode
    transcriber.model.decode = lambda waves, lengths, *args, **kwargs: (
        decoded.extend(lengths.tolist()) or decode(waves, lengths, *args, **kwargs)
    )
    result = transcriber.transcribe(path)
    assert result.chunks >= 5 and len(decoded) == 1  # the chunk holding the speech, none of the silent ones
    assert decoded[0] >= len(speech) and result.alignment.size(1) >= result.chunks


def test_leading_silence_is_trimmed_and_the_alignment_keeps_audio_time(speech_run, tiny_synth, tmp_path):
    from speech_attend.infer.transcribe import Transcriber

    speech, rate = sf.read(sorted((tiny_synth / "test").rglob("*.flac"))[0])
    path = tmp_path / "silence_then_speech.flac"
    sf.write(path, np.concatenate([np.zeros(rate), speech]), rate)  # 1 s of silence first
    transcriber = Transcriber.load(speech_run["ckpt"], max_chunk_seconds=60)
    decoded, decode = [], transcriber.model.decode
    transcriber.model.decode = lambda waves, lengths, *args, **kwargs: (
        decoded.extend(lengths.tolist()) or decode(waves, lengths, *args, **kwargs)
    )
    result = transcriber.transcribe(path)
    assert result.chunks == 1 and decoded[0] <= len(speech)  # the silence was not decoded
    frames_per_second = 1 / transcriber.model.frame_seconds
    used = result.alignment.abs().sum(0).nonzero().squeeze(1)
    assert used.numel() and int(used[0]) >= round(0.95 * frames_per_second)  # attention starts where the speech does
    assert result.alignment.size(1) >= round((1 + len(speech) / rate) * frames_per_second) - 1


def test_files_decoded_together_give_what_each_gives_alone_and_errors_keep_their_place(speech_run, tiny_synth, tmp_path):
    from speech_attend.infer.transcribe import Transcriber

    good = sorted(str(p) for p in tiny_synth.rglob("*.flac"))[:5]
    bad = tmp_path / "bad.wav"
    bad.write_text("not audio")
    paths = [good[0], good[1], str(bad), *good[2:]]
    transcriber = Transcriber.load(speech_run["ckpt"])
    alone = {path: transcriber.transcribe(path).text for path in good}
    calls, decode = [], transcriber.model.decode
    transcriber.model.decode = lambda waves, *args, **kwargs: calls.append(waves.size(0)) or decode(waves, *args, **kwargs)
    together = list(transcriber.transcribe_many(paths))
    assert len(calls) == 1 and calls[0] >= 5  # the five files' chunks in one batch
    assert [type(r).__name__ for r in together] == [
        "Transcript",
        "Transcript",
        "AudioError",
        "Transcript",
        "Transcript",
        "Transcript",
    ]
    assert str(bad) in str(together[2])
    assert [r.text for r in together if not isinstance(r, ValueError)] == [alone[path] for path in good]
    assert [r.audio for r in together if not isinstance(r, ValueError)] == good


def test_evaluate_joins_each_voice_into_long_files_and_reports_both_error_rates(speech_run, tiny_synth, capsys):
    argv = ["evaluate", "--model", str(speech_run["ckpt"]), "--devsets", str(tiny_synth), "--groups", "test"]
    assert speech_attend([*argv, "--conditions", "long", "--json", "-"]) == 0
    results = json.loads(capsys.readouterr().out)["groups"]["test"]
    voices = {p.parent.parent.name for p in (tiny_synth / "test").rglob("*.flac")}
    assert list(results) == ["clean", "long"]  # one file each, then the long files
    assert results["clean"]["utterances"] == 2 and results["long"]["files"] == len(voices)
    assert all(0 <= r["wer"] and 0 <= r["cer"] for r in results.values())
    assert speech_attend([*argv, "--conditions", "long"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in table[1:]] == [["test", "clean", "2"], ["test", "long", "2"]]  # the same utterances


@pytest.mark.slow
def test_transcribe_of_a_ten_minute_recording_runs_in_chunks(speech_run, tiny_synth, tmp_path, capsys):
    rate = 16000
    waves = [sf.read(f)[0] for f in sorted((tiny_synth / "test").rglob("*.flac"))]
    pattern = np.concatenate([np.concatenate([w, np.zeros(rate // 2)]) for w in waves])
    path = tmp_path / "ten_minutes.flac"
    sf.write(path, np.resize(pattern, 600 * rate), rate)
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    longest = torch.load(speech_run["ckpt"], map_location="cpu", weights_only=True)["hyper_parameters"]["decoding"][
        "max_chunk_seconds"
    ]
    assert result["duration_s"] == 600.0 and result["chunks"] >= 600 / longest
