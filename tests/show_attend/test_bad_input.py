"""Bad input to the captioner (``show-attend``), command by command.

Training skips an unreadable image, names it in ``skipped_samples.log`` and goes on; too many
unreadable images, or anything else a user can get wrong, end the command with one line
``show-attend: error: ...`` that names the file or value, and exit code 2. Images that are merely
unusual (greyscale, RGBA, 16-bit, odd sizes) must simply work.

The fit on 24 shapes images at 32 px with three unreadable ones is ``caption_run`` (conftest.py);
the errors both apps share are in ``tests/shared/test_bad_input.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from show_attend.cli import main as show_attend
from show_attend.data.dataset import collate
from show_attend.data.readers import read_karpathy
from show_attend.train.datamodule import CaptionDataModule
from tests.helpers import LOG_NAME, caption_config, one_line_error, read_skipped_log, shapes_copy, truncate

# ----------------------------------------------------------------------------- captioner: fit and test


@pytest.mark.slow
def test_captioner_fit_skips_and_logs_unreadable_images_and_saves_a_checkpoint(caption_run):
    assert caption_run["code"] == 0
    logs = list(caption_run["run"].rglob(LOG_NAME))
    assert [p.relative_to(caption_run["run"]).parts[:1] for p in logs] == [("version_0",)]
    skipped = read_skipped_log(logs[0])
    assert set(skipped) == caption_run["bad"] and len(logs[0].read_text().splitlines()) == 3  # one epoch: once each
    assert all("not a readable image" in reason for reason in skipped.values())
    checkpoint = torch.load(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 3


@pytest.mark.slow
def test_captioner_fit_with_too_many_unreadable_images_stops_in_one_line(tiny_shapes, tmp_path, capsys):
    data, train = shapes_copy(tiny_shapes, tmp_path)
    for i, path in enumerate(train[:12]):  # half the training set: empty, missing, text, truncated
        [lambda p: p.write_bytes(b""), Path.unlink, lambda p: p.write_text("text\n"), truncate][i % 4](path)
    config = caption_config(tmp_path, data)
    capsys.readouterr()
    assert show_attend(["fit", "--config", str(config), "--bad_samples.min_samples", "16"]) == 2
    error = one_line_error(capsys.readouterr().err, "show-attend")
    log = tmp_path / "run" / "version_0" / LOG_NAME
    assert "more than the limit of 1.0%" in error and str(log) in error
    skipped = read_skipped_log(log)
    assert skipped and set(skipped) <= {str(p) for p in train[:12]}


@pytest.mark.slow
def test_captioner_test_leaves_out_an_unreadable_test_image_and_logs_it(caption_run, tmp_path):
    data = shutil.copytree(caption_run["data"], tmp_path / "data")
    test_images = [r.path for r in read_karpathy(data / "dataset_shapes.json", data / "images") if r.split == "test"]
    truncate(test_images[0])
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
    data, train = shapes_copy(tiny_shapes, tmp_path)
    truncate(train[5])

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
    data, train = shapes_copy(tiny_shapes, tmp_path)
    train[0].write_text("a text file, not a PNG\n")
    config = caption_config(tmp_path, data)
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
    skipped = read_skipped_log(tmp_path / "run" / "version_0" / LOG_NAME)
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
    config = caption_config(tmp_path, data)
    assert show_attend(["fit", "--config", str(config)]) == 2
    error = one_line_error(capsys.readouterr().err, "show-attend")
    assert expected in error and str(data) in error


def test_captioner_maps_rare_and_unseen_words_to_unk_but_scores_against_the_real_words(tiny_shapes, tmp_path):
    data, _ = shapes_copy(tiny_shapes, tmp_path)
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
        image = truncate(Path(shutil.copy(source, tmp_path / "cut.png")))
    else:
        image = tmp_path / "cut.jpg"
        with Image.open(source) as picture:
            picture.convert("RGB").save(image, quality=95)
        truncate(image)
    capsys.readouterr()
    assert (
        show_attend(["caption", "--ckpt", str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"), str(image)]) == 2
    )
    error = one_line_error(capsys.readouterr().err, "show-attend")
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


@pytest.mark.parametrize("kind", ["missing", "empty", "text"])
def test_captioner_test_with_a_bad_checkpoint_is_a_one_line_error(tiny_shapes, tmp_path, capsys, kind):
    checkpoint = tmp_path / "model.ckpt"
    if kind != "missing":
        checkpoint.write_bytes(b"" if kind == "empty" else b"a text file, not a checkpoint\n")
    config = caption_config(tmp_path, tiny_shapes)
    assert show_attend(["test", "--config", str(config), "--ckpt_path", str(checkpoint)]) == 2
    assert "model.ckpt" in one_line_error(capsys.readouterr().err, "show-attend")
