"""The real-data path as a user walks it: Flickr8k- and COCO-format folders, a ResNet-101 weights
file, the feature cache, checkpoints with a frozen pretrained encoder.

The data are real-format stand-ins: a Karpathy split file with a dozen JPEGs of several sizes,
and a weights file saved from ``torchvision.models.resnet101(weights=None)`` that stands in
for the ImageNet file a user downloads (no network here). The shipped Flickr8k and COCO
configs are used as they are, with sizes overridden so a CPU runs them in seconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from shared.io.model_files import CheckpointError, safe_torch_load
from show_attend.cli import main as show_attend
from show_attend.data.feature_cache import FeatureCache
from show_attend.data.readers import DataError, find_image_dir, read_karpathy
from show_attend.infer.caption import load_captioner
from tests.helpers import one_line_error

ROOT = Path(__file__).resolve().parents[2]
WORDS = "a dog cat man woman runs sits on the grass beach road red blue small big".split()
# Small enough for a CPU: 64 px images (a 2x2 grid of ResNet-101 features) and a tiny decoder.
SMALL = [
    "--data.image_size",
    "64",
    "--model.encoder.grid_size",
    "2",
    "--data.batch_size",
    "4",
    "--data.num_workers",
    "0",
    "--data.min_word_freq",
    "1",
    "--model.decoder.embed_dim",
    "16",
    "--model.decoder.attention_dim",
    "16",
    "--model.decoder.hidden_dim",
    "16",
    "--model.decoding.beam_size",
    "2",
    "--model.decoding.max_length",
    "8",
    "--model.meteor",
    "false",
    "--trainer.accelerator",
    "cpu",
    "--trainer.precision",
    "32",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]


def _karpathy(folder: Path, name: str, coco: bool) -> Path:
    """A dozen JPEGs of several sizes (8 train, 2 val, 2 test) and their split file, 2-5 sentences each."""
    rng = np.random.default_rng(0)
    images = []
    for i in range(12):
        split = "train" if i < 8 else "val" if i < 10 else "test"
        subfolder = ("train2014" if split == "train" else "val2014") if coco else "Images"
        path = folder / subfolder / f"{i:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        width, height = [(64, 48), (320, 240), (500, 375), (375, 500), (100, 100)][i % 5]
        Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(path, quality=90)
        sentences = [{"tokens": list(rng.choice(WORDS, int(rng.integers(3, 8)))), "raw": ""} for _ in range(2 + i % 4)]
        entry = {"filename": path.name, "split": split, "sentences": sentences, "imgid": i}
        if coco:
            entry |= {"filepath": subfolder, "cocoid": 1000 + i}
        images.append(entry)
    split_file = folder / name
    split_file.write_text(json.dumps({"dataset": name, "images": images}))
    return folder


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """A stand-in for torchvision's ImageNet ResNet-101 file (random weights, the real keys)."""
    import torchvision

    path = tmp_path_factory.mktemp("weights") / "resnet101-standin.pth"
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet101(weights=None).state_dict(), path)
    return path


@pytest.fixture(scope="module")
def flickr8k(tmp_path_factory) -> Path:
    return _karpathy(tmp_path_factory.mktemp("flickr8k"), "dataset_flickr8k.json", coco=False)


@pytest.fixture(scope="module")
def coco(tmp_path_factory) -> Path:
    return _karpathy(tmp_path_factory.mktemp("coco"), "dataset_coco.json", coco=True)


def _fit_test_resume(config: str, data: Path, weights: Path, root: Path, cache: Path | None) -> dict:
    """The config's documented sequence: fit, test, fit --ckpt_path last (two more steps)."""
    common = [
        "--config",
        str(ROOT / config),
        "--data.data_dir",
        str(data),
        "--model.encoder.weights_path",
        str(weights),
        "--trainer.default_root_dir",
        str(root),
        *SMALL,
        "--data.feature_cache",
        str(cache) if cache else "null",
        # float16 cached features move an untrained model's scores by rounding; the repeat stop would turn
        # such a tie into another caption, and this test compares the cache, not decoding
        "--model.decoding.max_repeats",
        "null",
    ]
    assert show_attend(["fit", *common, "--trainer.max_steps", "3"]) == 0
    assert show_attend(["test", *common, "--ckpt_path", "last"]) == 0
    metrics = json.loads((root / "version_0" / "test_metrics.json").read_text())
    assert show_attend(["fit", *common, "--trainer.max_steps", "5", "--ckpt_path", "last"]) == 0
    assert safe_torch_load(root / "version_0" / "checkpoints" / "last.ckpt")["global_step"] == 5
    return metrics


@pytest.mark.slow
@pytest.mark.parametrize(
    "config, dataset",
    [
        ("configs/show_attend/flickr8k_resnet101_soft.yaml", "flickr8k"),
        ("configs/show_attend/coco_resnet101_soft.yaml", "coco"),
    ],
)
def test_the_configs_fit_test_resume_with_the_feature_cache_equal_the_runs_without(request, weights, tmp_path, config, dataset):
    data = request.getfixturevalue(dataset)
    cached = _fit_test_resume(config, data, weights, tmp_path / "cached", tmp_path / "cache")
    plain = _fit_test_resume(config, data, weights, tmp_path / "plain", None)
    assert all(math.isfinite(value) for value in cached.values() if isinstance(value, float)), cached
    assert cached.keys() == plain.keys()
    for name, value in plain.items():
        assert cached[name] == (value if value is None else pytest.approx(value, rel=1e-4, abs=1e-6)), name
    # one cache file per split used, built from the ResNet-101 weights in use, never from random ones
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "cache").glob("*.npy")) == ["test", "train", "val"]


def test_features_that_overflow_float16_are_cached_in_float32_and_read_back_exactly(flickr8k, tmp_path):
    records = [r for r in read_karpathy(flickr8k / "dataset_flickr8k.json", flickr8k / "Images") if r.split == "val"]

    def huge(images: torch.Tensor) -> torch.Tensor:  # like a random-weight ResNet-101: values past 65504
        return images.mean(1).flatten(1)[:, :4, None] * 1e5 + 7e4  # (B, 4, 1)

    cache = FeatureCache(tmp_path, {"encoder": "huge"})
    with pytest.warns(UserWarning, match="float32"):
        cache.write("val", records, huge, 64, "cpu")
    cached = cache.load("val", len(records))
    assert cached.features.dtype == np.float32 and np.isfinite(cached.features).all()
    from show_attend.data.images import image_transform, load_image

    expected = huge(torch.stack([image_transform(64)(load_image(r.path)) for r in records]))
    np.testing.assert_allclose(cached.features, expected.numpy(), rtol=1e-6)


def test_a_cache_is_used_only_when_finished_and_matching(flickr8k, tmp_path):
    records = [r for r in read_karpathy(flickr8k / "dataset_flickr8k.json", flickr8k / "Images") if r.split == "val"]
    encode = lambda images: images.mean((2, 3))[:, None, :]  # noqa: E731  (B, 1, 3)
    cache = FeatureCache(tmp_path, {"encoder": "mean"})
    assert cache.load("val", len(records)) is None
    cache.write("val", records, encode, 64, "cpu")
    assert cache.load("val", len(records)) is not None
    meta = next(tmp_path.glob("val-*.json"))
    meta.unlink()  # a write that was killed before its metadata: never read
    assert cache.load("val", len(records)) is None
    cache.write("val", records, encode, 64, "cpu")
    assert cache.load("val", len(records) + 1) is None  # another split file's image count
    assert FeatureCache(tmp_path, {"encoder": "other weights"}).load("val", len(records)) is None


def test_non_finite_features_stop_the_cache_with_the_image_named(flickr8k, tmp_path):
    records = [r for r in read_karpathy(flickr8k / "dataset_flickr8k.json", flickr8k / "Images") if r.split == "val"]

    def broken(images: torch.Tensor) -> torch.Tensor:
        features = images.mean((2, 3))[:, None, :].clone()
        features[-1, 0, 0] = float("nan")
        return features

    with pytest.raises(DataError, match=f"{records[-1].path}: the encoder gave NaN or infinite features"):
        FeatureCache(tmp_path, {"encoder": "broken"}).write("val", records, broken, 64, "cpu")
    assert not list(tmp_path.glob("val-*.json"))  # nothing that looks finished


@pytest.mark.parametrize("folder", ["Images", "Flicker8k_Dataset", "."])
def test_the_image_folder_is_found_in_the_layouts_people_have(flickr8k, tmp_path, folder):
    data = tmp_path / "data"
    (data / folder).mkdir(parents=True, exist_ok=True)
    for image in (flickr8k / "Images").iterdir():
        (data / folder / image.name).write_bytes(image.read_bytes())
    records = read_karpathy(flickr8k / "dataset_flickr8k.json", ".")
    assert find_image_dir(data, records) == data / folder


def test_a_data_folder_without_its_images_is_one_line_naming_the_folder(flickr8k, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_flickr8k.json").write_text((flickr8k / "dataset_flickr8k.json").read_text())
    (data / "Images").mkdir()  # the folder is there, the images are not
    code = show_attend(
        [
            "fit",
            "--config",
            str(ROOT / "configs/show_attend/flickr8k_resnet101_soft.yaml"),
            "--data.data_dir",
            str(data),
            "--model.encoder.pretrained",
            "false",
            *SMALL,
            "--data.feature_cache",
            "null",
        ]
    )
    error = one_line_error(capsys.readouterr().err, "show-attend")
    assert code == 2 and str(data) in error and "0000.jpg" in error and "data.image_dir" in error


def test_a_validation_without_readable_images_warns_and_training_goes_on(flickr8k, tmp_path):
    data = tmp_path / "data"
    (data / "Images").mkdir(parents=True)
    for image in (flickr8k / "Images").iterdir():
        (data / "Images" / image.name).write_bytes(image.read_bytes() if image.name not in ("0008.jpg", "0009.jpg") else b"x")
    (data / "dataset_flickr8k.json").write_text((flickr8k / "dataset_flickr8k.json").read_text())
    args = [
        "fit",
        "--config",
        str(ROOT / "configs/show_attend/flickr8k_resnet101_soft.yaml"),
        "--data.data_dir",
        str(data),
        "--model.encoder.backbone",
        "small",
        "--model.encoder.pretrained",
        "false",
        *SMALL,
        "--trainer.max_steps",
        "4",
        "--data.feature_cache",
        "null",
        "--trainer.default_root_dir",
        str(tmp_path / "run"),
    ]
    with pytest.warns(UserWarning, match="checkpoint.monitor is 'val/bleu4', but this validation logged no such value"):
        assert show_attend(args) == 0  # the monitored metric was never logged; the run still ends well
    assert safe_torch_load(tmp_path / "run" / "version_0" / "checkpoints" / "last.ckpt")["global_step"] == 4


# ----------------------------------------------------------------------------- what checkpoints carry


@pytest.fixture(scope="module")
def frozen_run(flickr8k, weights, tmp_path_factory) -> Path:
    """A 2-step fit of the Flickr8k config with the stand-in ResNet-101 frozen (the paper's setting)."""
    root = tmp_path_factory.mktemp("frozen")
    assert (
        show_attend(
            [
                "fit",
                "--config",
                str(ROOT / "configs/show_attend/flickr8k_resnet101_soft.yaml"),
                "--data.data_dir",
                str(flickr8k),
                "--model.encoder.weights_path",
                str(weights),
                "--trainer.default_root_dir",
                str(root),
                *SMALL,
                "--trainer.max_steps",
                "2",
                "--data.feature_cache",
                str(root / "cache"),
            ]
        )
        == 0
    )
    return root / "version_0"


def test_checkpoints_leave_out_the_frozen_pretrained_encoder_and_keep_one_copy(frozen_run, weights):
    files = sorted(p.name for p in (frozen_run / "checkpoints").iterdir())
    assert files == ["best.ckpt", "last.ckpt"]  # no epoch=...-step=... or last-v1 copies beside them
    checkpoint = safe_torch_load(frozen_run / "checkpoints" / "last.ckpt")
    assert not any(key.startswith("model.encoder.") for key in checkpoint["state_dict"])
    assert checkpoint["omitted_weights"]["keys"] and (frozen_run / "checkpoints" / "last.ckpt").stat().st_size < 20e6
    assert weights.stat().st_size > 150e6  # what each checkpoint would otherwise carry


def test_a_checkpoint_without_its_encoder_restores_it_from_the_weights_file_and_checks_it(frozen_run, weights, tmp_path):
    checkpoint = frozen_run / "checkpoints" / "last.ckpt"
    model = load_captioner(checkpoint)  # the weights file where training found it
    reference = torch.load(weights, weights_only=True)
    torch.testing.assert_close(model.encoder.blocks[0][0].weight, reference["conv1.weight"])
    other = tmp_path / "other.pth"
    torch.save({key: value + 1 if value.is_floating_point() else value for key, value in reference.items()}, other)
    with pytest.raises(CheckpointError, match="not the one this model was trained with"):
        load_captioner(checkpoint, encoder_weights=str(other))
    with pytest.raises(ValueError, match="encoder weights file not found"):
        load_captioner(checkpoint, encoder_weights=str(tmp_path / "missing.pth"))


def test_export_leaves_the_encoder_out_unless_asked_and_both_caption_alike(frozen_run, flickr8k, tmp_path, capsys):
    checkpoint = str(frozen_run / "checkpoints" / "last.ckpt")
    assert show_attend(["export", "--ckpt", checkpoint, "--out", str(tmp_path / "small")]) == 0
    assert show_attend(["export", "--ckpt", checkpoint, "--out", str(tmp_path / "whole"), "--include-encoder"]) == 0
    small, whole = ((tmp_path / name / "model.safetensors").stat().st_size for name in ("small", "whole"))
    assert small < 20e6 < 150e6 < whole
    image = str(flickr8k / "Images" / "0010.jpg")
    capsys.readouterr()
    for folder in ("small", "whole"):
        assert show_attend(["caption", "--ckpt", str(tmp_path / folder), image]) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first == second


def test_a_left_out_encoder_without_its_weights_file_is_one_line(frozen_run, flickr8k, tmp_path, capsys):
    assert show_attend(["export", "--ckpt", str(frozen_run / "checkpoints" / "last.ckpt"), "--out", str(tmp_path / "m")]) == 0
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["hyper_parameters"]["encoder"]["weights_path"] = str(tmp_path / "gone.pth")  # another machine
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert show_attend(["caption", "--ckpt", str(tmp_path / "m"), str(flickr8k / "Images" / "0010.jpg")]) == 2
    error = one_line_error(capsys.readouterr().err, "show-attend")
    assert "gone.pth: encoder weights file not found" in error
