"""The captioner app (show_attend): data, encoder, decoder, loss, decoding, commands.

Everything runs on tiny fixtures made here: a few 32x32 shapes images, models of a few thousand
parameters. One tiny model is trained once through ``show-attend fit`` and shared.
"""

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from shared import greedy_search
from shared.io.bad_samples import BadSample
from shared.io.model_files import export_folder, safe_torch_load
from show_attend.cli import EncoderToFeatureCache, main
from show_attend.data.dataset import collate
from show_attend.data.images import load_image
from show_attend.data.readers import DataError, read_karpathy
from show_attend.infer.caption import APP, Captioning, caption_images, load_captioner
from show_attend.model.encoder import BACKBONES, Encoder, EncoderConfig, EncoderWeightsError
from show_attend.train.datamodule import CaptionDataModule
from show_attend.train.module import CaptionerModule, doubly_stochastic_penalty
from show_attend.train.pointing import pointing_hits

TINY_MODEL = {
    "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
    "decoder": {"embed_dim": 24, "attention_dim": 24, "hidden_dim": 32, "dropout": 0.0},
}


def _tiny_config(path: Path, data_dir: Path, run_dir: Path, max_steps: int = 8) -> Path:
    path.write_text(
        f"""seed_everything: 0
trainer:
  accelerator: cpu
  max_steps: {max_steps}
  val_check_interval: 3
  num_sanity_val_steps: 0
  enable_progress_bar: false
  enable_model_summary: false
  default_root_dir: {run_dir}
model:
  encoder: {json.dumps(TINY_MODEL["encoder"])}
  decoder: {json.dumps(TINY_MODEL["decoder"])}
  optimizer: {{lr: 0.003}}
  decoding: {{beam_size: 2, max_length: 12}}
data:
  data_dir: {data_dir}
  image_size: 32
  batch_size: 8
  min_word_freq: 1
"""
    )
    return path


@pytest.fixture(scope="module")
def caption_trained(tiny_shapes, tmp_path_factory) -> Path:
    """The run folder (``<root>/version_0``) after `show-attend fit` of a tiny model for 8 steps."""
    root = tmp_path_factory.mktemp("run")
    config = _tiny_config(root / "tiny.yaml", tiny_shapes, root)
    assert main(["fit", "--config", str(config)]) == 0
    return root / "version_0"


def _tiny_captioner(vocabulary: list[str], attention: str = "soft") -> CaptionerModule:
    decoder = {**TINY_MODEL["decoder"], "attention": attention}
    return CaptionerModule(
        vocabulary, encoder=TINY_MODEL["encoder"], decoder=decoder, image_size=32, decoding={"beam_size": 3, "max_length": 10}
    )


def _batch(datamodule: CaptionDataModule, size: int = 8) -> dict:
    dataset = datamodule.dataset("train")
    return collate([dataset[i] for i in range(size)])


# ---------------------------------------------------------------- data


def _write_karpathy(path: Path, images: list[dict]) -> Path:
    path.write_text(json.dumps({"dataset": "x", "images": images}))
    return path


def test_karpathy_coco_form_reads_filepath_folders_and_folds_restval_into_train(tmp_path):
    entry = lambda name, folder, split, words: {  # noqa: E731
        "filepath": folder,
        "filename": name,
        "split": split,
        "cocoid": 1,
        "sentences": [{"tokens": words, "raw": " ".join(words)}, {"raw": "A Dog, running."}],
    }
    path = _write_karpathy(
        tmp_path / "dataset_coco.json",
        [
            entry("a.jpg", "train2014", "train", ["a", "cat"]),
            entry("b.jpg", "val2014", "restval", ["a", "dog"]),
            entry("c.jpg", "val2014", "test", ["a", "bird"]),
        ],
    )
    records = read_karpathy(path, tmp_path)
    assert [r.split for r in records] == ["train", "train", "test"]
    assert records[1].path == tmp_path / "val2014" / "b.jpg"
    assert records[0].references == [["a", "cat"], ["a", "dog", "running"]]  # raw tokenised when tokens absent


def test_karpathy_flickr_form_reads_images_from_one_folder(tmp_path):
    path = _write_karpathy(
        tmp_path / "dataset_flickr8k.json",
        [
            {"filename": "1000268201_693b08cb0e.jpg", "split": "val", "sentences": [{"tokens": ["a", "child"]}]},
        ],
    )
    (record,) = read_karpathy(path, tmp_path / "Flicker8k_Dataset")
    assert record.path == tmp_path / "Flicker8k_Dataset" / "1000268201_693b08cb0e.jpg"
    assert record.split == "val" and record.references == [["a", "child"]]


def test_malformed_karpathy_entry_is_named_in_a_one_line_error(tmp_path):
    path = _write_karpathy(tmp_path / "dataset_x.json", [{"filename": "a.jpg", "split": "dev", "sentences": []}])
    with pytest.raises(DataError, match=r"images\[0\] \(a\.jpg\).*'split'") as error:
        read_karpathy(path, tmp_path)
    assert "\n" not in str(error.value)


def test_each_epoch_draws_one_random_reference_per_image(tiny_shapes):
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=32, batch_size=4, min_word_freq=1)
    dataset = datamodule.dataset("train")
    assert len(dataset) == 24  # images, not captions
    torch.manual_seed(0)
    drawn = {tuple(dataset[0]["caption"].tolist()) for _ in range(40)}
    assert len(drawn) > 1
    assert all(datamodule.vocabulary.decode(c) in datamodule.split("train")[0].references for c in drawn)


def test_kept_images_are_the_same_tensors_and_later_reads_skip_the_files(tiny_shapes, tmp_path):
    data_dir = tmp_path / "shapes"
    shutil.copytree(tiny_shapes, data_dir)
    fresh = CaptionDataModule(str(data_dir), image_size=24, min_word_freq=1).dataset("val")
    kept = CaptionDataModule(str(data_dir), image_size=24, min_word_freq=1, keep_images=True).dataset("val")
    first = [kept[i] for i in range(len(kept))]
    for item, expected in zip(first, (fresh[i] for i in range(len(fresh)))):
        assert torch.equal(item["image"], expected["image"]) and item["size"] == expected["size"]
    shutil.rmtree(data_dir / "images")
    again = [kept[i] for i in range(len(kept))]
    assert all(torch.equal(a["image"], b["image"]) and a["size"] == b["size"] for a, b in zip(again, first))
    assert isinstance(fresh[0], BadSample)  # the files are gone; only the kept copies remain


def test_kept_images_leave_an_augmented_training_split_random(tiny_shapes):
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=24, min_word_freq=1, keep_images=True, augment=True)
    assert datamodule.dataset("train").kept is None and datamodule.dataset("val").kept == {}


def test_load_image_converts_greyscale_rgba_and_16_bit_to_rgb(tmp_path):
    Image.new("L", (7, 5), 128).save(tmp_path / "grey.png")
    Image.new("RGBA", (9, 4), (255, 0, 0, 0)).save(tmp_path / "clear.png")
    Image.fromarray(np.full((6, 6), 65535, dtype=np.uint16)).save(tmp_path / "deep.png")
    grey, clear, deep = (load_image(tmp_path / n) for n in ("grey.png", "clear.png", "deep.png"))
    assert grey.mode == clear.mode == deep.mode == "RGB"
    assert grey.size == (7, 5) and grey.getpixel((0, 0)) == (128, 128, 128)
    assert clear.getpixel((0, 0)) == (255, 255, 255)  # transparent: composited on white
    assert deep.getpixel((0, 0)) == (255, 255, 255)  # 16-bit full scale, not clipped garbage


# ---------------------------------------------------------------- model


@pytest.mark.parametrize("backbone", BACKBONES)
def test_encoder_gives_grid_features_for_each_backbone(backbone):
    encoder = Encoder(EncoderConfig(backbone=backbone, pretrained=False, grid_size=3, small_channels=16)).eval()
    with torch.no_grad():
        features = encoder(torch.randn(2, 3, 48, 40))
    assert features.shape == (2, 9, encoder.feature_dim)
    assert encoder.feature_dim == {"resnet": 2048, "vgg": 512}.get(backbone[:-2] if backbone[:3] == "vgg" else backbone[:6], 18)


def test_encoder_trains_only_the_last_blocks_asked_for():
    frozen = Encoder(EncoderConfig(backbone="vgg16", pretrained=False))
    tuned = Encoder(EncoderConfig(backbone="vgg16", pretrained=False, fine_tune_blocks=1)).train()
    assert frozen.frozen and not any(p.requires_grad for p in frozen.parameters())
    assert [any(p.requires_grad for p in b.parameters()) for b in tuned.blocks] == [False] * 4 + [True]


def test_pretrained_weights_unavailable_error_says_how_to_give_a_file(monkeypatch, tmp_path):
    from torchvision.models import ResNet50_Weights

    def offline(*args, **kwargs):
        raise OSError("<urlopen error [Errno -3] Temporary failure in name resolution>")

    monkeypatch.setattr(ResNet50_Weights.IMAGENET1K_V2.__class__, "get_state_dict", offline)
    with pytest.raises(EncoderWeightsError, match="weights_path") as error:
        Encoder(EncoderConfig(backbone="resnet50", pretrained=True))
    assert "download.pytorch.org" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(EncoderWeightsError, match="not found"):
        Encoder(EncoderConfig(backbone="vgg16", weights_path=str(tmp_path / "missing.pth")))


def test_weights_path_loads_a_local_torchvision_file(tmp_path):
    from torchvision.models.vgg import cfgs, make_layers

    features = make_layers(cfgs["D"])  # VGG-16's convolutions, keyed as in torchvision's file
    torch.save({f"features.{k}": v for k, v in features.state_dict().items()}, tmp_path / "vgg16.pth")
    encoder = Encoder(EncoderConfig(backbone="vgg16", weights_path=str(tmp_path / "vgg16.pth")))
    torch.testing.assert_close(encoder.blocks[0][0].weight, features[0].weight)
    torch.testing.assert_close(encoder.blocks[4][-2].weight, features[-3].weight)  # conv5_3, before the last pool


def test_a_half_precision_weights_file_gives_a_float32_encoder_and_another_network_s_file_is_one_line(tmp_path):
    from torchvision.models.vgg import cfgs, make_layers

    features = make_layers(cfgs["D"])
    half = tmp_path / "vgg16-half.pth"
    torch.save({f"features.{k}": v.half() for k, v in features.state_dict().items()}, half)
    encoder = Encoder(EncoderConfig(backbone="vgg16", weights_path=str(half)))
    assert {p.dtype for p in encoder.parameters()} == {torch.float32} and not any(p.is_meta for p in encoder.parameters())
    torch.testing.assert_close(encoder.blocks[0][0].weight, features[0].weight.half().float(), rtol=0, atol=0)
    with pytest.raises(EncoderWeightsError) as error:
        Encoder(EncoderConfig(backbone="resnet50", weights_path=str(half)))
    message = str(error.value)
    assert message.startswith(f"{half}: not resnet50's weights") and "missing" in message and "\n" not in message


def test_doubly_stochastic_penalty_matches_hand_computation_without_padded_steps():
    alphas = torch.tensor([[[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]]])  # (B=1, T=3, L=2); step 3 is padding
    mask = torch.tensor([[True, True, False]])
    # sum_t alpha = [1.5, 0.5] -> (1 - 1.5)^2 + (1 - 0.5)^2 = 0.5 (with the padded step it would be 0.58)
    torch.testing.assert_close(doubly_stochastic_penalty(alphas, mask), torch.tensor([0.5]))


def test_hard_attention_loss_gives_finite_gradients_to_the_attention(tiny_shapes):
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1)
    model = _tiny_captioner(datamodule.vocabulary_tokens, attention="hard")
    torch.manual_seed(0)
    loss, logs = model.loss(_batch(datamodule), sample=True)
    loss.backward()
    score = model.model.decoder.attention.score
    for param in (score.v.weight, score.key_proj.weight, model.model.decoder.embedding.weight):
        assert param.grad is not None and torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0
    assert torch.isfinite(loss) and bool(model.baseline.initialised)


def test_a_few_training_steps_lower_the_loss(tiny_shapes):
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1)
    torch.manual_seed(0)
    model = _tiny_captioner(datamodule.vocabulary_tokens)
    batch = _batch(datamodule)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = model.loss(batch)[0].item()
    for _ in range(15):
        optimizer.zero_grad()
        model.loss(batch)[0].backward()
        optimizer.step()
    assert model.loss(batch)[0].item() < 0.8 * first


def test_beam_search_with_one_beam_equals_greedy_decoding(tiny_shapes):
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1)
    torch.manual_seed(3)
    model = _tiny_captioner(datamodule.vocabulary_tokens).model.eval()
    with torch.no_grad():
        features = model.encode(_batch(datamodule, 6)["images"])
        memory, state = model.decoder.start(features)
        greedy = greedy_search(
            lambda t, s: model.decoder.step(t, s, memory), state, 6, 1, 2, 10, max_repeats=model.decoding.max_repeats
        )
    beam = model.search(features, beam_size=1)
    assert [h.tokens for h in beam] == greedy
    assert all(h.attention.shape == (len(h.tokens), 16) for h in beam)


@pytest.mark.parametrize("max_length", [1, 3, 5])
def test_a_caption_that_never_ends_has_exactly_max_length_words(tiny_shapes, tmp_path, capsys, max_length):
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1)
    torch.manual_seed(0)
    module = _tiny_captioner(datamodule.vocabulary_tokens).eval()
    model = module.model
    with torch.no_grad():
        model.decoder.out_vocab.bias[model.vocabulary.eos_id] = -1e3  # <eos> is never among the likely words
    # caption --max-length N
    export_folder(tmp_path / "model", APP, model.state_dict(), dict(module.hparams))
    images = [str(p) for p in sorted((tiny_shapes / "images").glob("*.png"))[:2]]
    assert main(["caption", "--ckpt", str(tmp_path / "model"), "--max-length", str(max_length), "--json", *images]) == 0
    assert [len(json.loads(line)["tokens"]) for line in capsys.readouterr().out.splitlines()] == [max_length] * 2
    # validation and test: the model's decoding.max_length
    model.decoding = replace(model.decoding, max_length=max_length)
    with torch.no_grad():
        captions = model.decode(_batch(datamodule, 4)["images"])
    assert [len(h.tokens) for h in captions] == [max_length] * 4
    assert all(h.finished and h.attention.shape == (max_length, 16) for h in captions)


def test_pointing_counts_attribute_words_whose_peak_is_in_the_named_box():
    objects = [
        {"shape": "circle", "colour": "red", "size": "big", "box": [0, 0, 16, 16]},
        {"shape": "square", "colour": "blue", "size": "small", "box": [16, 16, 32, 32]},
    ]
    tokens = "a big red circle above a small blue square".split()
    attention = torch.zeros(len(tokens), 2, 2)
    for t in (1, 2, 3):
        attention[t, 0, 0] = 1.0  # top-left cell: inside the circle's box
    for t in (6, 7):
        attention[t, 1, 1] = 1.0  # bottom-right cell: inside the square's box
    attention[8, 0, 1] = 1.0  # "square" while looking at an empty cell
    assert pointing_hits(tokens, attention, objects, (32, 32)) == (5, 6)
    reverse = "a small blue square below a big red circle".split()  # objects named in reverse order
    looks = torch.zeros(len(reverse), 2, 2)
    looks[1:4, 1, 1] = 1.0  # the square
    looks[6:9, 0, 0] = 1.0  # the circle
    assert pointing_hits(reverse, looks, objects, (32, 32)) == (6, 6)


# ---------------------------------------------------------------- commands


def test_fit_leaves_a_last_checkpoint_at_max_steps_that_loads_safely(caption_trained, tiny_shapes):
    checkpoint = safe_torch_load(caption_trained / "checkpoints" / "last.ckpt")  # weights_only=True
    assert checkpoint["global_step"] == 8  # saved at the end, not at the last validation (step 6)
    vocabulary = CaptionDataModule(str(tiny_shapes), min_word_freq=1).vocabulary_tokens
    assert load_captioner(caption_trained / "checkpoints" / "last.ckpt").vocabulary.itos[4:] == vocabulary


def test_test_command_writes_metrics_json(caption_trained):
    checkpoint = caption_trained / "checkpoints" / "last.ckpt"
    assert main(["test", "--config", str(caption_trained.parent / "tiny.yaml"), "--ckpt_path", str(checkpoint)]) == 0
    metrics = json.loads((caption_trained / "test_metrics.json").read_text())  # beside the checkpoint's run
    assert {"bleu1", "bleu4", "rouge_l", "cider", "exact_match", "pointing_accuracy"} <= set(metrics)
    assert metrics["items"] == 4


def test_evaluate_scores_a_split_as_test_does_without_lightning(caption_trained, tiny_shapes, tmp_path, capsys):
    checkpoint = caption_trained / "checkpoints" / "last.ckpt"
    assert main(["test", "--config", str(caption_trained.parent / "tiny.yaml"), "--ckpt_path", str(checkpoint)]) == 0
    tested = json.loads((caption_trained / "test_metrics.json").read_text())
    capsys.readouterr()
    out = tmp_path / "scores.json"
    argv = ["evaluate", "--model", str(checkpoint), "--data", str(tiny_shapes), "--no-meteor", "--json", str(out)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "test: 4 images, beam 2" and [line.split()[0] for line in lines[1:]] == [
        "bleu1",
        "bleu2",
        "bleu3",
        "bleu4",
        "meteor",
        "rouge_l",
        "cider",
        "exact_match",
    ]
    scores = json.loads(out.read_text())
    assert scores["images"] == tested["items"] == 4 and scores["meteor"] is None and scores["unreadable"] == 0
    for name in ("bleu1", "bleu2", "bleu3", "bleu4", "rouge_l", "cider", "exact_match"):
        assert scores[name] == pytest.approx(tested[name]), name
    assert main(["evaluate", "--model", str(checkpoint), "--data", str(tiny_shapes), "--split", "dev"]) == 2
    assert "--split must be one of train, val, test" in capsys.readouterr().err


def test_caption_prints_captions_and_writes_one_overlay_per_image(caption_trained, tiny_shapes, tmp_path, capsys):
    images = sorted((tiny_shapes / "images").glob("*.png"))[:2]
    with Image.open(images[0]) as image:
        image.convert("L").resize((50, 37)).save(tmp_path / "grey_odd_size.jpg")
    paths = [*map(str, images), str(tmp_path / "grey_odd_size.jpg")]
    ckpt = str(caption_trained / "checkpoints" / "last.ckpt")
    assert main(["caption", "--ckpt", ckpt, *paths, "--overlay-dir", str(tmp_path / "overlays"), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["image"] for line in lines] == paths
    for line in lines:
        assert {"image", "caption", "tokens", "overlay"} <= set(
            line
        )  # and the beams with their scores (tests/show_attend/test_gallery.py)
        assert line["caption"] == " ".join(line["tokens"])
        with Image.open(line["overlay"]) as overlay:
            assert overlay.format == "PNG" and overlay.width > 32


def test_init_from_an_export_starts_a_new_run_from_its_weights(caption_trained, tmp_path):
    """The shared ``--init_from`` on the captioner: the export's weights and words, step 0."""
    ckpt = caption_trained / "checkpoints" / "last.ckpt"
    assert main(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "exported")]) == 0
    # a learning rate of 1e-12: the one step leaves the weights where the run started them
    assert (
        main(
            [
                "fit",
                "--config",
                str(caption_trained.parent / "tiny.yaml"),
                "--trainer.default_root_dir",
                str(tmp_path / "run"),
                "--trainer.max_steps",
                "1",
                "--init_from",
                str(tmp_path / "exported"),
                "--model.optimizer.lr",
                "1e-12",
            ]
        )
        == 0
    )
    started, trained = safe_torch_load(next((tmp_path / "run").rglob("last.ckpt"))), safe_torch_load(ckpt)
    assert started["global_step"] == 1 and started["hyper_parameters"]["vocabulary"] == trained["hyper_parameters"]["vocabulary"]
    weights = {
        key: value
        for key, value in trained["state_dict"].items()  # the step moves batch-norm statistics, and
        if key.startswith("model.") and "running_" not in key and "batches_tracked" not in key
    }  # not the REINFORCE baseline
    assert weights and all(
        torch.allclose(started["state_dict"][key].float(), value.float(), atol=1e-8) for key, value in weights.items()
    )


def test_export_saves_the_beam_size_as_captions_default(caption_trained, tmp_path, capsys):
    ckpt = caption_trained / "checkpoints" / "last.ckpt"
    assert main(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "wide"), "--beam-size", "7"]) == 0
    assert Captioning.load(tmp_path / "wide").beam_size == 7
    assert main(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "x"), "--beam-size", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--beam-size must be >= 1" in err and len(err.splitlines()) == 1 and not (tmp_path / "x").exists()


def test_export_then_caption_from_the_folder_gives_the_same_caption(caption_trained, tiny_shapes, tmp_path):
    ckpt, exported = caption_trained / "checkpoints" / "last.ckpt", tmp_path / "exported"
    assert main(["export", "--ckpt", str(ckpt), "--out", str(exported)]) == 0
    assert sorted(p.name for p in exported.iterdir()) == ["config.json", "model.safetensors"]
    images = sorted((tiny_shapes / "images").glob("*.png"))[-3:]
    from_ckpt = caption_images(load_captioner(ckpt), images)
    from_folder = caption_images(load_captioner(exported), images)
    assert [r.tokens for r in from_folder] == [r.tokens for r in from_ckpt]
    torch.testing.assert_close(from_folder[0].attention, from_ckpt[0].attention)


@pytest.mark.parametrize("content", [None, b"not an image at all"])
def test_caption_of_a_missing_or_non_image_file_is_a_one_line_error(caption_trained, tmp_path, capsys, content):
    image = tmp_path / "photo.png"
    if content is not None:
        image.write_bytes(content)
    code = main(["caption", "--ckpt", str(caption_trained / "checkpoints" / "last.ckpt"), str(image)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("show-attend: error:") and str(image) in err


def test_caption_goes_on_past_a_bad_image_and_exits_2(caption_trained, tiny_shapes, tmp_path, capsys):
    good = [str(p) for p in sorted((tiny_shapes / "images").glob("*.png"))[:2]]
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    code = main(["caption", "--ckpt", str(caption_trained / "checkpoints" / "last.ckpt"), good[0], str(bad), good[1], "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert [json.loads(line)["image"] for line in captured.out.splitlines()] == good
    (error,) = captured.err.strip().splitlines()
    assert error.startswith("show-attend: error:") and str(bad) in error


@pytest.mark.parametrize("content", [b"", b"hello, not a checkpoint"])
def test_caption_with_a_broken_checkpoint_is_a_one_line_error(tiny_shapes, tmp_path, capsys, content):
    (tmp_path / "model.ckpt").write_bytes(content)
    image = sorted((tiny_shapes / "images").glob("*.png"))[0]
    assert main(["caption", "--ckpt", str(tmp_path / "model.ckpt"), str(image)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.ckpt" in err


def test_caption_command_runs_as_a_program(caption_trained, tiny_shapes):
    image = sorted((tiny_shapes / "images").glob("*.png"))[0]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "show_attend.cli",
            "caption",
            "--ckpt",
            str(caption_trained / "checkpoints" / "last.ckpt"),
            str(image),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{image}: ")


def test_prepare_shapes_command_writes_a_karpathy_file(tmp_path, capsys):
    out = tmp_path / "shapes"
    args = ["prepare", "shapes", "--out", str(out), "--train", "3", "--val", "1", "--test", "1", "--image-size", "32", "--quiet"]
    assert main(args) == 0
    records = read_karpathy(out / "dataset_shapes.json", out / "images")
    assert [r.split for r in records] == ["train"] * 3 + ["val", "test"]
    assert all(r.path.is_file() and r.objects for r in records)


def test_frozen_encoder_features_are_cached_once_and_used_for_training(tiny_shapes, tmp_path):
    import pytorch_lightning as pl

    cache = tmp_path / "cache"
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=32, batch_size=8, min_word_freq=1, feature_cache=str(cache))
    model = CaptionerModule(
        datamodule.vocabulary_tokens,
        encoder={"backbone": "vgg16", "pretrained": False, "grid_size": 2},
        decoder=TINY_MODEL["decoder"],
        image_size=32,
        decoding={"beam_size": 1, "max_length": 5},
    )
    trainer = pl.Trainer(
        max_steps=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        callbacks=[EncoderToFeatureCache()],
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule)
    assert [p.name.split("-")[0] for p in cache.glob("*.npy")] == ["train"]  # the split fit used (no validation here)
    batch = collate([datamodule.dataset("train")[0]])
    assert "features" in batch and batch["features"].shape == (1, 4, 512)
    with torch.no_grad():  # the cached features are the encoder's, in float16
        images = collate([CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1).dataset("train")[0]])["images"]
        expected = model.model.encode(images)
    torch.testing.assert_close(batch["features"], expected, atol=2e-2, rtol=1e-2)
