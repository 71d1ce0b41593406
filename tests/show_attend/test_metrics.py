"""Caption metrics against known values (the speech metrics: ``tests/speech_attend/test_metrics.py``).

The caption values below were produced by the COCO caption evaluation itself, pycocoevalcap
1.2 (pip), run outside this project: its Java PTBTokenizer followed by its Bleu(4), Rouge,
Cider and Meteor scorers, on the raw captions written here (fixture A), and its scorers on the
already-tokenised captions of fixture B. Expected tokens come from the same Stanford
PTBTokenizer 3.4.1 (``-preserveLines -lowerCase``) plus the COCO punctuation filter.
"""

import os
import shutil
import warnings

import pytest

from show_attend.evaluate import metrics
from show_attend.evaluate.metrics import (
    METEOR_JAR_ENV,
    caption_metrics,
    cider_d,
    corpus_bleu,
    exact_match,
    meteor_score,
    rouge_l,
    tokenize_caption,
)

# Fixture A: 5 images, 2-5 references each; "soup" shares no 4-gram with its references.
HYPOTHESES_A = {
    "horse": "A man is riding a horse on the beach.",
    "dogs": "Two dogs play with a frisbee.",
    "cat": "A cat sleeping on a laptop keyboard",
    "soup": "a bowl of soup next to bread",
    "rain": "A woman holding an umbrella in the rain.",
}
REFERENCES_A = {
    "horse": [
        "A man rides a brown horse along the beach.",
        "A person riding a horse on a sandy beach.",
        "A man on horseback near the ocean.",
    ],
    "dogs": [
        "Two dogs are playing with a red frisbee in the grass.",
        "A pair of dogs chase a frisbee.",
        "Dogs playing in a park with a toy.",
        "Two brown dogs running on the lawn.",
        "Two dogs fight over a frisbee.",
    ],
    "cat": ["A cat is lying on top of a laptop.", "The kitten sleeps on a computer keyboard."],
    "soup": [
        "A plate with a sandwich and a salad.",
        "Lunch served on a white plate.",
        "A sandwich cut in half with chips on the side.",
        "Food on a table in a restaurant.",
    ],
    "rain": [
        "A woman holds an umbrella in the rain.",
        "A lady walking in the rain with an umbrella.",
        "Someone's umbrella is open on a rainy street.",
    ],
}
# pycocoevalcap 1.2 (PTBTokenizer + Bleu/Rouge/Cider/Meteor) on fixture A.
EXPECTED_A = {
    "bleu1": 0.7297297296902849,
    "bleu2": 0.6040404496586957,
    "bleu3": 0.407298453897137,
    "bleu4": 0.3098198323492035,
    "rouge_l": 0.60701796358519,
    "cider": 1.6264462216482858,
}
EXPECTED_A_METEOR = 0.3340662534683195

# Fixture B: hypotheses shorter than their references (brevity penalty), a tie between two
# closest reference lengths ("b": 4 words vs 3 and 5), no 4-gram match in the whole corpus,
# and an empty hypothesis.
HYPOTHESES_B = {"a": "a dog", "b": "red car parked outside", "c": ""}
REFERENCES_B = {
    "a": ["a dog runs", "the dog is running fast"],
    "b": ["a red car", "a car parked on street"],
    "c": ["a bird on a branch", "small bird sitting"],
}
# pycocoevalcap 1.2 (Bleu/Rouge/Cider on these tokenised strings) on fixture B.
EXPECTED_B = {
    "bleu1": 0.5054422162587139,
    "bleu2": 0.47950458867429846,
    "bleu3": 4.115943767378621e-06,
    "bleu4": 1.4340532041398001e-08,
    "rouge_l": 0.4528967867575462,
    "cider": 1.55455061601554,
}


@pytest.fixture
def no_meteor(monkeypatch):
    # An empty variable turns METEOR off even where pycocoevalcap (and its jar) is installed.
    monkeypatch.setenv(METEOR_JAR_ENV, "")


@pytest.fixture
def new_process(monkeypatch):
    """METEOR's warnings come once per process: this test starts with none given yet."""
    monkeypatch.setattr(metrics, "_warned", set(), raising=False)


def _assert_close(got: dict, expected: dict) -> None:
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key


# --- tokenisation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("A man's riding a horse.", "a man 's riding a horse"),
        (
            'Two dogs don\'t play (with) a "frisbee" on the grass!',
            "two dogs do n't play -lrb- with -rrb- a frisbee on the grass",
        ),
        (
            "The black-and-white cat, sitting on a U.S. flag; it can't move...",
            "the black-and-white cat sitting on a u.s. flag it ca n't move",
        ),
        (
            "A woman -- smiling -- holds a [red] {umbrella}?",
            "a woman smiling holds a -lsb- red -rsb- -lcb- umbrella -rcb-",
        ),
        ('It costs $5 & 50% off at 3.5 o\'clock: "yes"', "it costs $ 5 & 50 % off at 3.5 o'clock yes"),
        (
            "The 1,000 people at 3:30 pm watched a 2.5 mile race.",
            "the 1,000 people at 3:30 pm watched a 2.5 mile race",
        ),
        ("Mr. and Mrs. Smith at the beach.", "mr. and mrs. smith at the beach"),
        ("The kids' toys are on the floor.", "the kids toys are on the floor"),
        ("A bathroom with a toilet,sink and mirror.", "a bathroom with a toilet sink and mirror"),
        ("A sign that says no.", "a sign that says no"),
    ],
)
def test_tokenize_caption_matches_ptb_tokenizer_on_plain_english(text, expected):
    assert tokenize_caption(text) == expected.split()


def test_tokenize_caption_is_idempotent():
    for text in [*HYPOTHESES_A.values(), *(c for refs in REFERENCES_A.values() for c in refs)]:
        tokens = tokenize_caption(text)
        assert tokenize_caption(" ".join(tokens)) == tokens


# --- caption metrics against pycocoevalcap ------------------------------------------------------


def test_caption_metrics_match_pycocoevalcap(no_meteor):
    got = caption_metrics(HYPOTHESES_A, REFERENCES_A)
    assert set(got) == {"bleu1", "bleu2", "bleu3", "bleu4", "rouge_l", "cider", "meteor"}
    _assert_close(got, EXPECTED_A)


def test_brevity_penalty_ties_and_missing_4grams_match_pycocoevalcap(no_meteor):
    got = caption_metrics(HYPOTHESES_B, REFERENCES_B)
    _assert_close(got, EXPECTED_B)
    # The COCO smoothing makes a corpus without any 4-gram match tiny, not exactly 0.
    assert 0 < got["bleu4"] < 1e-6


def test_scorers_on_tokens_equal_the_entry_point(no_meteor):
    hyps = [tokenize_caption(HYPOTHESES_A[k]) for k in HYPOTHESES_A]
    refs = [[tokenize_caption(c) for c in REFERENCES_A[k]] for k in HYPOTHESES_A]
    expected_bleu = [EXPECTED_A[f"bleu{n}"] for n in range(1, 5)]
    assert corpus_bleu(hyps, refs) == pytest.approx(expected_bleu, abs=1e-6)
    assert rouge_l(hyps, refs) == pytest.approx(EXPECTED_A["rouge_l"], abs=1e-6)
    assert cider_d(hyps, refs) == pytest.approx(EXPECTED_A["cider"], abs=1e-6)


def test_cider_is_zero_for_a_single_image_and_perfect_caption_scores_full_bleu_rouge(no_meteor):
    # idf comes from the evaluated set: with one image every n-gram has idf log(1) = 0.
    got = caption_metrics({"x": "a man riding a horse"}, {"x": ["a man riding a horse"]})
    assert got["cider"] == 0.0
    assert got["rouge_l"] == 1.0
    assert got["bleu4"] == pytest.approx(1.0, abs=1e-6)


def test_dict_order_does_not_change_scores(no_meteor):
    reordered = {k: HYPOTHESES_A[k] for k in reversed(list(HYPOTHESES_A))}
    _assert_close(caption_metrics(reordered, REFERENCES_A), EXPECTED_A)


def test_exact_match_compares_tokenised_captions():
    hyps = {1: "A dog runs.", 2: "a cat", 3: "Two birds!", 4: ""}
    refs = {
        1: ["a dog runs", "a dog is running"],
        2: ["a black cat"],
        3: ["a bird", "two birds"],
        4: ["x"],
    }
    assert exact_match(hyps, refs) == pytest.approx(2 / 4)


# --- errors -----------------------------------------------------------------------------------


def test_mismatched_keys_raise_value_error():
    with pytest.raises(ValueError, match="same keys"):
        caption_metrics({1: "a dog", 2: "a cat"}, {1: ["a dog"], 3: ["a cat"]}, meteor=False)


def test_empty_reference_list_raises_value_error():
    with pytest.raises(ValueError, match="at least one reference"):
        caption_metrics({1: "a dog"}, {1: []}, meteor=False)


def test_reference_given_as_a_string_raises_value_error():
    with pytest.raises(ValueError, match="list of strings"):
        exact_match({1: "a dog"}, {1: "a dog"})


def test_reference_without_words_raises_value_error():
    with pytest.raises(ValueError, match="no words"):
        caption_metrics({1: "a dog"}, {1: ["a dog", " . "]}, meteor=False)


def test_no_images_raises_value_error():
    with pytest.raises(ValueError, match="no hypotheses"):
        caption_metrics({}, {}, meteor=False)


# --- METEOR -------------------------------------------------------------------------------


def test_meteor_is_none_when_disabled_by_empty_env(no_meteor):
    assert metrics.find_meteor_jar() is None
    assert caption_metrics(HYPOTHESES_B, REFERENCES_B)["meteor"] is None


def test_meteor_is_none_when_configured_jar_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv(METEOR_JAR_ENV, str(tmp_path / "missing.jar"))
    with pytest.warns(UserWarning, match="not a file"):
        assert meteor_score([["a"]], [[["a"]]]) is None


def test_meteor_is_none_without_java(monkeypatch, tmp_path, new_process):
    jar = tmp_path / "meteor-1.5.jar"
    jar.write_bytes(b"")
    monkeypatch.setattr(metrics.shutil, "which", lambda name: None)
    with pytest.warns(UserWarning, match="METEOR needs Java"):
        assert meteor_score([["a"]], [[["a"]]], jar=jar) is None


def _meteor_warnings(calls: int = 3) -> list[str]:
    """The warnings of ``calls`` METEOR scorings (``meteor: true`` at every validation)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(calls):
            assert caption_metrics(HYPOTHESES_B, REFERENCES_B, meteor=True)["meteor"] is None
    return [str(w.message) for w in caught]


def test_meteor_without_java_says_so_once(monkeypatch, tmp_path, new_process):
    jar = tmp_path / "meteor-1.5.jar"
    jar.write_bytes(b"")
    monkeypatch.setenv(METEOR_JAR_ENV, str(jar))
    monkeypatch.setenv("PATH", str(tmp_path))  # no java here
    assert _meteor_warnings() == ["METEOR needs Java (no `java` on PATH); it is reported as None."]


def test_meteor_without_a_jar_says_so_once_and_how_to_give_one(monkeypatch, new_process):
    monkeypatch.delenv(METEOR_JAR_ENV, raising=False)
    monkeypatch.setattr(metrics, "find_meteor_jar", lambda: None)  # no pycocoevalcap with its jar either
    (message,) = _meteor_warnings()
    assert "METEOR 1.5 jar" in message and METEOR_JAR_ENV in message and message.endswith("reported as None.")


def test_meteor_turned_off_by_an_empty_variable_is_not_warned_about(no_meteor, new_process):
    assert _meteor_warnings() == []


def test_meteor_failure_is_reported_as_none(tmp_path):
    if shutil.which("java") is None:
        pytest.skip("needs java to start and fail")
    not_a_jar = tmp_path / "meteor-1.5.jar"
    not_a_jar.write_text("not a jar")
    with pytest.warns(UserWarning, match="METEOR failed"):
        assert meteor_score([["a"]], [[["a"]]], jar=not_a_jar) is None


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get(METEOR_JAR_ENV) or shutil.which("java") is None,
    reason=f"set {METEOR_JAR_ENV} to a METEOR 1.5 jar (takes ~7 s of JVM start-up)",
)
def test_meteor_matches_pycocoevalcap_when_jar_is_configured():
    got = caption_metrics(HYPOTHESES_A, REFERENCES_A)
    assert got["meteor"] == pytest.approx(EXPECTED_A_METEOR, abs=1e-6)
