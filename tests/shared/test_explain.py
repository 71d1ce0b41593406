"""Attention against occlusion: the comparison, both apps' maps, and the explain commands."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest
import torch

from shared.evaluation.faithfulness import compare_maps, rank_correlation
from shared.io.model_files import export_folder
from show_attend.cli import main as show_attend
from show_attend.data.dataset import collate
from show_attend.infer.explain import occlusion_drops, word_log_probs
from show_attend.train.datamodule import CaptionDataModule
from show_attend.train.module import CaptionerModule
from speech_attend.cli import main as speech_attend
from speech_attend.infer.explain import span_drops
from speech_attend.model.las import build_recognizer
from tests.helpers import TINY_SPEECH_CONFIG


def test_rank_correlation_and_peaks():
    a = torch.tensor([0.1, 0.5, 0.2, 0.9])
    assert rank_correlation(a, a * 3 + 1) == pytest.approx(1.0)
    assert rank_correlation(a, -a) == pytest.approx(-1.0)
    assert math.isnan(rank_correlation(torch.ones(4), a))  # a constant map has no ranking
    assert rank_correlation(torch.tensor([1.0, 1.0, 2.0]), torch.tensor([0.0, 0.0, 5.0])) == pytest.approx(1.0)  # ties averaged
    comparison = compare_maps(torch.tensor([0.7, 0.1, 0.1, 0.1]), torch.tensor([0.0, 2.0, 1.0, 3.0]), top=3)
    assert comparison.attention_peak == 0 and comparison.occlusion_peak == 3 and not comparison.peak_in_top
    assert comparison.drop_at_attention_peak == 0.0 and comparison.drop_at_random == pytest.approx(2.0)


@pytest.fixture(scope="module")
def trained_captioner(tiny_shapes):
    """A tiny captioner fitted to a batch of tiny_shapes for a few dozen steps."""
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1)
    torch.manual_seed(0)
    module = CaptionerModule(
        datamodule.vocabulary_tokens,
        encoder={"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
        decoder={"embed_dim": 24, "attention_dim": 24, "hidden_dim": 32, "dropout": 0.0},
        image_size=32,
        decoding={"beam_size": 2, "max_length": 12},
        doubly_stochastic=0.0,
    )
    batch = collate([datamodule.dataset("val")[i] for i in range(4)])
    optimizer = torch.optim.Adam(module.parameters(), lr=3e-3)
    for _ in range(60):
        optimizer.zero_grad()
        module.loss(batch)[0].backward()
        optimizer.step()
    return module.model.eval(), batch


def test_occluding_nothing_changes_nothing_and_occluding_everything_lowers_the_caption(trained_captioner):
    model, batch = trained_captioner
    features = model.encode(batch["images"][:1])  # (1, L, D)
    tokens = model.search(features)[0].tokens
    cells = features.size(1)
    masks = torch.stack([torch.zeros(cells, dtype=torch.bool), torch.ones(cells, dtype=torch.bool)])
    drops = occlusion_drops(model, features, tokens, masks)  # (2, T)
    assert drops.shape == (2, len(tokens)) and len(tokens) > 2
    torch.testing.assert_close(drops[0], torch.zeros(len(tokens)), atol=1e-6, rtol=0)  # nothing removed: the same, to rounding
    assert drops[1].sum() > 0  # the image's information removed: its own caption becomes less likely
    single = occlusion_drops(model, features, tokens, torch.eye(cells, dtype=torch.bool))
    assert single.shape == (cells, len(tokens)) and torch.isfinite(single).all()
    log_probs, attention = word_log_probs(model, features, tokens)
    assert log_probs.shape == (1, len(tokens)) and (log_probs <= 0).all()
    torch.testing.assert_close(attention.sum(-1), torch.ones(1, len(tokens)))


@pytest.mark.parametrize("pixels", [False, True])
def test_explain_command_writes_a_png_and_a_line_per_word(trained_captioner, tiny_shapes, tmp_path, capsys, pixels):
    model, _ = trained_captioner
    module_hparams = {
        "vocabulary": model.vocabulary.to_dict()["tokens"],
        **model.config.to_dict(),
        "decoding": asdict(model.decoding),
    }
    export_folder(tmp_path / "model", "show-attend", model.state_dict(), module_hparams)
    images = sorted(str(p) for p in (tiny_shapes / "images").glob("*.png"))[:2]
    args = ["explain", "--ckpt", str(tmp_path / "model"), *images, str(tmp_path / "missing.png"), "--out", str(tmp_path / "out")]
    assert show_attend(args + (["--pixels"] if pixels else [])) == 2  # the missing file is one error line; the others explained
    captured = capsys.readouterr()
    assert "missing.png" in captured.err and len(captured.err.strip().splitlines()) == 1
    lines = [json.loads(line) for line in (tmp_path / "out" / "explain.jsonl").read_text().splitlines()]
    for image in images:
        words = [line for line in lines if line["image"] == image]
        printed = next(line for line in captured.out.splitlines() if line.startswith(image))
        assert [w["word"] for w in words] == printed.split(": ", 1)[1].split("  [")[0].split()
        assert all(0 <= w["attention_peak"] < 16 and isinstance(w["attention_peak_in_top_occlusion"], bool) for w in words)
        assert (tmp_path / "out" / f"{image.rsplit('/', 1)[1][:-4]}.png").read_bytes()[:4] == b"\x89PNG"


def test_speech_span_drops_and_explain_command(tiny_synth, tmp_path, capsys):
    hparams = {key: TINY_SPEECH_CONFIG["model"][key] for key in ("las", "decoding")} | {
        "vocabulary": list("abcdefghijklmnopqrstuvwxyz '")
    }
    torch.manual_seed(0)
    model = build_recognizer(hparams)
    vocabulary = model.vocabulary
    model.eval()
    wave = torch.randn(16000) * 0.1
    states, frames = model.encode(wave[None], torch.tensor([16000]))
    tokens = [vocabulary.stoi[c] for c in "abc"]
    drops = span_drops(model, states, int(frames[0]), tokens, span=3)
    assert drops.shape == (math.ceil(int(frames[0]) / 3), 3) and torch.isfinite(drops).all()
    export_folder(tmp_path / "model", "speech-attend", model.state_dict(), hparams)
    files = sorted(str(p) for p in (tiny_synth / "test").rglob("*.flac"))
    assert speech_attend(["explain", "--ckpt", str(tmp_path / "model"), *files, "--out", str(tmp_path / "out")]) == 0
    lines = [json.loads(line) for line in (tmp_path / "out" / "explain.jsonl").read_text().splitlines()]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(files)
    for file, line in zip(files, printed):
        text = line.split(": ", 1)[1].split("  [")[0]
        assert "".join(c["char"] for c in lines if c["audio"] == file) == text
