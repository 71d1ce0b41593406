"""scripts/experiments/bottleneck.py: the object-level scores, and a tiny run of both experiments."""

from __future__ import annotations

import json

import pytest

from scripts.experiments import bottleneck


def test_caption_objects_and_object_f1():
    tokens = "there is a big red circle to the left of a blue square above a small green triangle".split()
    named = bottleneck.caption_objects(tokens)
    assert named == [
        {"size": "big", "colour": "red", "shape": "circle"},
        {"colour": "blue", "shape": "square"},
        {"size": "small", "colour": "green", "shape": "triangle"},
    ]
    truth = [{"size": "big", "colour": "red", "shape": "circle"}, {"size": "big", "colour": "blue", "shape": "square"}]
    assert bottleneck.object_f1(named, truth) == pytest.approx(2 * 2 / 5)  # 2 right of 3 named, 2 real
    assert bottleneck.object_f1(named[:1], truth[:1]) == 1.0
    assert bottleneck.object_f1([{"size": "small", "colour": "red", "shape": "circle"}], truth[:1]) == 0.0  # wrong size said
    assert bottleneck.object_f1([{"colour": "red"}], truth[:1]) == 0.0  # a colour alone names no object


@pytest.mark.slow
def test_a_tiny_run_trains_both_models_of_both_apps_and_reports_by_length(tiny_shapes, tiny_synth, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "shapes").symlink_to(tiny_shapes)
    (data / "synth").symlink_to(tiny_synth)
    assert bottleneck.main(["--steps", "2", "--per-length", "1", "--data", str(data), "--out", str(tmp_path / "out")]) == 0
    out = tmp_path / "out" / "full"
    results = json.loads((out / "results.json").read_text())
    for label in ("attention", "fixed vector"):
        counts = results["captioner"][label]
        assert sorted(counts) == ["1", "2", "3", "4", "5", "6"]  # scenes longer than any in training too
        assert all(0 <= c["exact_match"] <= 1 and 0 <= c["object_f1"] <= 1 for c in counts.values())
        bins = results["recognizer"][label]
        longest = results["recognizer"]["longest_training_seconds"]
        assert max(int(s) for s in bins) >= int(2 * longest)  # the joined files are there
        assert sum(b["utterances"] for b in bins.values()) == 2 + 2  # the test split's 2, and one joined file per length
    for plot in ("captioner_exact_match.png", "captioner_object_f1.png", "recognizer.png"):
        assert (out / plot).read_bytes()[:4] == b"\x89PNG"
    table = capsys.readouterr().out
    assert "| 6 |" in table and "CER" in table
