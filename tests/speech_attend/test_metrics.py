"""Speech metrics against known values: WER and CER, the terms the corpus WER sums, and the
interval of an edit ratio (the caption metrics: ``tests/show_attend/test_metrics.py``)."""

import math

import numpy as np
import pytest

from speech_attend.evaluate.metrics import (
    char_error_rate,
    edit_ratio_interval,
    speech_metrics,
    utterance_word_edits,
    word_error_rate,
)

# --- speech metrics ---------------------------------------------------------------------------


def test_wer_and_cer_on_a_hand_computed_example():
    refs = ["the cat sat", "hello world"]
    hyps = ["the cat sit down", ""]
    # Words: sat->sit and +down (2 edits), then 2 deletions, over 3 + 2 reference words.
    assert word_error_rate(refs, hyps) == pytest.approx(4 / 5)
    # Characters: a->i and +" down" (6 edits), then 11 deletions, over 11 + 11 characters.
    assert char_error_rate(refs, hyps) == pytest.approx(17 / 22)
    expected = {"wer": pytest.approx(4 / 5), "cer": pytest.approx(17 / 22)}
    assert speech_metrics(refs, hyps) == expected


def test_wer_is_corpus_level_not_a_mean_of_utterances():
    # Per utterance 1/1 and 0/4 would average to 0.5; the corpus rate is 1/5.
    assert word_error_rate(["a", "a b c d"], ["b", "a b c d"]) == pytest.approx(1 / 5)


def test_empty_reference_adds_insertions_only():
    assert word_error_rate(["", "a b"], ["x y", "a b"]) == pytest.approx(2 / 2)
    assert char_error_rate(["", "ab"], ["x", "ab"]) == pytest.approx(1 / 2)


def test_whitespace_runs_do_not_change_the_cer():
    assert char_error_rate(["a  b "], [" a b"]) == 0.0


def test_speech_metrics_errors():
    with pytest.raises(ValueError, match="every reference is empty"):
        word_error_rate(["", " "], ["a", ""])
    with pytest.raises(ValueError, match="one hypothesis per reference"):
        char_error_rate(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="lists of strings"):
        word_error_rate("a b", "a b")
    assert math.isfinite(word_error_rate(["a"], [""]))


def test_utterance_word_edits_are_the_terms_the_corpus_wer_sums():
    refs = ["the cat sat", "hello world", "", "a b c d"]
    hyps = ["the cat sit down", "", "x y", "a  b c d"]
    edits = utterance_word_edits(refs, hyps)
    assert edits == [2, 2, 2, 0]
    assert sum(edits) / 9 == pytest.approx(word_error_rate(refs, hyps))
    with pytest.raises(ValueError, match="one hypothesis per reference"):
        utterance_word_edits(["a"], [])


def test_the_edit_ratio_interval_is_exact_when_every_clip_has_the_same_ratio():
    base = [1, 3, 2, 5, 4]
    assert edit_ratio_interval(base, [2 * e for e in base]) == pytest.approx((2.0, 2.0))


def test_the_edit_ratio_interval_holds_the_ratio_and_narrows_with_more_clips():
    rng = np.random.default_rng(1)
    base = rng.poisson(2.0, size=200)
    other = base + rng.poisson(0.3, size=200) - rng.binomial(1, 0.1, size=200) * (base > 0)
    ratio = other.sum() / base.sum()
    low, high = edit_ratio_interval(base, other)
    assert low < ratio < high
    low4, high4 = edit_ratio_interval(np.tile(base, 4), np.tile(other, 4))
    # Four times the clips: about half as wide (the width falls as one over the square root).
    assert 0.35 < (high4 - low4) / (high - low) < 0.65
    with pytest.raises(ValueError, match="no edits"):
        edit_ratio_interval([0, 0], [1, 0])
    with pytest.raises(ValueError, match="equal, non-empty"):
        edit_ratio_interval([1, 2], [1])
