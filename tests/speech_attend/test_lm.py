"""The speller's language model: it learns from text, it is fused into the beam as one weighted
scorer (weight 0 changes nothing; a weight w adds exactly w * log p_lm), and its files are
refused in one line when they are broken or over other characters than the recognizer's."""

import json
from dataclasses import asdict, replace

import numpy as np
import pytest
import soundfile as sf
import torch

from shared import Vocabulary, beam_search
from shared.io.model_files import export_folder
from speech_attend.builtin.wordnet_sentences import wordnet_definitions
from speech_attend.cli import main as speech_attend
from speech_attend.infer.transcribe import APP, Transcriber
from speech_attend.model.features import FeatureConfig
from speech_attend.model.las import LAS, DecodeConfig, LASConfig, native_cpu_kernels
from speech_attend.model.lm import (
    LM_FILES,
    CharLM,
    LMConfig,
    Scorer,
    WeightedScorers,
    bfloat16_is_fast,
    length_bonus_scorer,
    lm_scorer,
    load_lm,
    save_lm,
)
from speech_attend.train.lm import EXAMPLE_REPEATS, fit_lm, lm_sentences, perplexity, wordnet_lm_splits

RATE = 16000
_LAS = LASConfig(
    listener_hidden=16,
    pyramid_layers=1,
    input_stack=4,
    speller_hidden=32,
    speller_layers=1,
    embedding_dim=8,
    attention_dim=8,
    location_filters=2,
    location_kernel=5,
    dropout=0.0,
    ctc_upsample=2,
)
_CHARS = list(" etaoinsrhldcumfpgywbvkx'jzq")
_TINY_LM = LMConfig(embedding_dim=8, hidden=16, layers=1, dropout=0.0)
_TEXT = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog", "the mat is on the log"]


def _vocabulary(chars=_CHARS) -> Vocabulary:
    return Vocabulary(list(chars))


def _random_lm(vocabulary: Vocabulary, seed: int = 0) -> CharLM:
    torch.manual_seed(seed)
    return CharLM(_TINY_LM, len(vocabulary)).eval()


def _speech_like(seconds: float = 1.0, seed: int = 0) -> np.ndarray:
    """Noise whose loudness rises and falls as speech does (so it is not taken for silence)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * rng.standard_normal(t.size) * (0.55 + 0.45 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


@pytest.fixture(scope="module")
def recognizer():
    """An untrained recognizer (with a CTC head) and its vocabulary."""
    torch.manual_seed(0)
    vocabulary = _vocabulary()
    return LAS(_LAS, FeatureConfig(freq_masks=0, time_masks=0), vocabulary).eval(), vocabulary


@pytest.fixture(scope="module")
def files(tmp_path_factory, recognizer):
    """The recognizer exported, a language model over its characters, one over other characters, and a clip."""
    model, vocabulary = recognizer
    root = tmp_path_factory.mktemp("lm")
    hparams = {
        "vocabulary": vocabulary.to_dict()["tokens"],
        "las": asdict(_LAS),
        "features": asdict(model.frontend.config),
        "decoding": asdict(DecodeConfig(beam_size=2)),
    }
    exported = export_folder(root / "model", APP, model.state_dict(), hparams)
    lm = save_lm(root / "lm", _random_lm(vocabulary), vocabulary, {"text_source": "test"})
    other = _vocabulary("abc ")
    foreign = save_lm(root / "foreign_lm", _random_lm(other), other)
    clip = root / "clip.wav"
    sf.write(clip, _speech_like(), RATE)
    return {"model": exported, "lm": lm, "foreign_lm": foreign, "clip": clip, "root": root}


def _waves(batch: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    waves = torch.stack([torch.from_numpy(_speech_like(0.8, seed)) for seed in range(batch)])
    return waves, torch.full((batch,), waves.size(1))


# ----------------------------------------------------------------------------- the model


def test_lm_loss_falls_on_a_tiny_text():
    vocabulary = _vocabulary()
    untrained = perplexity(_random_lm(vocabulary), _TEXT, vocabulary)
    lm, record = fit_lm(_TEXT * 4, vocabulary, _TINY_LM, max_steps=120, batch_size=8, lr=1e-2, progress=False)
    assert record["steps"] == 120
    assert record["losses"][-1] < record["losses"][0] - 1.0
    assert perplexity(lm, _TEXT, vocabulary) < untrained / 3


def test_interrupted_training_stops_after_the_update_and_keeps_the_model(monkeypatch):
    import os
    import signal

    import speech_attend.train.lm as lm_module

    calls, tensors = [], lm_module._tensors

    def interrupting(batch, vocabulary):
        calls.append(1)
        if len(calls) == 3:  # Ctrl-C in the middle of the third update
            os.kill(os.getpid(), signal.SIGINT)
        return tensors(batch, vocabulary)

    monkeypatch.setattr(lm_module, "_tensors", interrupting)
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN under nohup or a background job, Python's own handler at a terminal
    lm, record = fit_lm(_TEXT, _vocabulary(), _TINY_LM, max_steps=1000, batch_size=2, progress=False)
    assert record["stopped"] and record["steps"] == 3
    assert signal.getsignal(signal.SIGINT) is before  # the handler is given back


def test_lm_score_is_the_sum_of_its_step_log_probs():
    vocabulary = _vocabulary()
    lm = _random_lm(vocabulary)
    sequences = [vocabulary.encode("the cat"), vocabulary.encode("a")]
    total = torch.zeros(2)
    with torch.no_grad():
        state, tokens = lm.initial_state(2), torch.full((2,), vocabulary.sos_id)
        for i in range(max(map(len, sequences)) + 1):
            log_probs, state, _ = lm.step(tokens, state)
            nexts = [s[i] if i < len(s) else vocabulary.eos_id for s in sequences]
            for row, (s, token) in enumerate(zip(sequences, nexts)):
                if i <= len(s):
                    total[row] += log_probs[row, token]
            tokens = torch.tensor(nexts)
        torch.testing.assert_close(lm.score(sequences, vocabulary.sos_id, vocabulary.eos_id), total, atol=1e-5, rtol=0)


def test_same_characters_in_another_order_are_mapped_onto_the_recognizers_ids(tmp_path):
    vocabulary, shuffled = _vocabulary(), _vocabulary(list(reversed(_CHARS)))
    lm = _random_lm(shuffled)
    save_lm(tmp_path, lm, shuffled)
    mapped, hparams = load_lm(tmp_path, vocabulary)
    text = "the dog's log"
    with torch.no_grad():
        expected = lm.score([shuffled.encode(text)], shuffled.sos_id, shuffled.eos_id)
        found = mapped.score([vocabulary.encode(text)], vocabulary.sos_id, vocabulary.eos_id)
    torch.testing.assert_close(found, expected)
    assert hparams["vocabulary"] == vocabulary.to_dict()["tokens"]


def test_wordnet_training_text_holds_no_dev_or_test_sentence():
    vocabulary = _vocabulary()
    splits = wordnet_lm_splits()
    train = lm_sentences("wordnet", vocabulary)
    assert len(train) == len(splits["train"])
    assert not set(train) & (set(splits["dev"]) | set(splits["test"]))


def test_wordnet_definitions_leave_out_the_held_out_sentences_synsets(tmp_path):
    # Three synsets in the database's own line format: offset, lexicographer fields, then " | " and the gloss.
    lines = [
        "  1 This software and database is being provided to you, the LICENSEE, by Princeton University\n",
        '00001740 03 n 01 closet 0 000 | a small room for storing clothes; a cupboard; "she hung her coat in the closet"\n',
        '00002137 03 n 01 meadow 0 000 | a field of grass kept for hay; "the cows grazed in the meadow"\n',
        '00002452 03 v 01 run 0 000 | move fast on foot; "he ran to the station"\n',
    ]
    for name in ("data.noun", "data.verb", "data.adj", "data.adv"):
        (tmp_path / name).write_text("".join(lines) if name == "data.noun" else "", encoding="latin-1")
    held_out = {"the cows grazed in the meadow"}  # a dev sentence: its synset's definition stays out too
    definitions = wordnet_definitions(held_out, tmp_path)
    assert definitions == ["a small room for storing clothes", "move fast on foot"]  # "a cupboard" has 2 words


def test_wordnet_with_definitions_is_the_examples_repeated_and_the_definitions(monkeypatch):
    from speech_attend.builtin import wordnet_sentences
    from speech_attend.train import lm as lm_training

    splits = {"train": ["the dog ran home", "we ate the soup"], "dev": ["a dev sentence here"], "test": ["a test sentence here"]}
    seen = {}

    def definitions(held_out):
        seen["held_out"] = held_out
        return ["a small room for storing clothes"]

    monkeypatch.setattr(lm_training, "wordnet_lm_splits", lambda: splits)
    monkeypatch.setattr(wordnet_sentences, "wordnet_definitions", definitions)
    text = lm_sentences("wordnet+definitions", _vocabulary())
    assert text == splits["train"] * EXAMPLE_REPEATS + ["a small room for storing clothes"]
    assert seen["held_out"] == {"a dev sentence here", "a test sentence here"}  # the definitions leave these out


# ----------------------------------------------------------------------------- shallow fusion


def test_fusion_with_weight_zero_gives_exactly_the_same_hypotheses(recognizer):
    model, vocabulary = recognizer
    waves, lengths = _waves()
    config = DecodeConfig(beam_size=3, ctc_weight=0.3)
    plain, _ = model.decode(waves, lengths, config)
    fused, _ = model.decode(waves, lengths, config, lm=_random_lm(vocabulary))  # lm_weight 0: left out
    assert [(h.tokens, h.score, h.normalized_score) for h in fused] == [(h.tokens, h.score, h.normalized_score) for h in plain]
    with_weight, _ = model.decode(
        waves, lengths, DecodeConfig(beam_size=3, ctc_weight=0.3, lm_weight=1.0), lm=_random_lm(vocabulary)
    )
    assert [h.score for h in with_weight] != [h.score for h in plain]


def test_fused_step_adds_weight_times_the_lm_log_probs_and_the_length_bonus():
    vocabulary = _vocabulary()
    lm, V, eos = _random_lm(vocabulary), len(vocabulary), vocabulary.eos_id
    attention = torch.randn(3, V).log_softmax(-1)

    def decoder(tokens, state, memory=None):
        return attention, state, None

    scorers = WeightedScorers(
        {
            "attention": Scorer(1.0, decoder, torch.zeros(3)),
            "lm": lm_scorer(lm, 0.5, 3),
            "length": length_bonus_scorer(0.25, V, eos, 3),
        }
    )
    tokens = torch.tensor([vocabulary.sos_id, 5, 6])
    with torch.no_grad():
        fused, state, _, parts = scorers.step(tokens, scorers.initial_state())
        lm_log_probs, _, _ = lm.step(tokens, lm.initial_state(3))
    bonus = torch.full((V,), 0.25)
    bonus[eos] = 0.0
    assert torch.equal(fused, attention + 0.5 * lm_log_probs + bonus)
    assert set(state) == {"attention", "lm", "length"}
    assert torch.equal(parts["attention"], attention) and torch.equal(parts["lm"], lm_log_probs)  # each unweighted
    assert torch.equal(parts["length"], (bonus / 0.25).expand(3, -1))


def test_beam_score_is_attention_plus_weight_times_lm_plus_bonus(recognizer):
    model, vocabulary = recognizer
    lm = _random_lm(vocabulary)
    waves, lengths = _waves(1)
    sos, eos = vocabulary.sos_id, vocabulary.eos_id
    config = DecodeConfig(beam_size=1, ctc_weight=0.0, lm_weight=0.7, length_bonus=0.2, max_len_ratio=0.5)
    (hyp,), _ = model.decode(waves, lengths, config, lm=lm)
    targets = hyp.tokens + ([eos] if hyp.finished else [])
    with torch.no_grad():
        logits = model(waves, lengths, torch.tensor([[sos, *targets[:-1]]]))["logits"]  # teacher forced
        attention = logits.log_softmax(-1)[0, torch.arange(len(targets)), torch.tensor(targets)].sum()
        lm_score = lm.score([hyp.tokens], sos, eos, [hyp.finished])[0]
    assert hyp.score == pytest.approx(float(attention + 0.7 * lm_score + 0.2 * len(hyp.tokens)), abs=1e-4)


def _fused_nbest(model, vocabulary, lm, weight, bonus=0.0, beam=3):
    """One utterance's n-best from the fused search, with its scorers and CTC log-probabilities."""
    sos, eos = vocabulary.sos_id, vocabulary.eos_id
    waves, lengths = _waves(1)
    with torch.no_grad():
        states, frames = model.encode(waves, lengths)
        memory, state = model.speller.start(states, frames)
        scorers = WeightedScorers(
            {
                "attention": Scorer(1.0, model.speller.step, state),
                "lm": lm_scorer(lm, weight, 1),
                "length": length_bonus_scorer(bonus, len(vocabulary), eos, 1),
            }
        )
        [hyps] = beam_search(
            scorers.step, scorers.initial_state(), 1, beam, sos, eos, 20, 1.0, nbest=beam, memory=memory, must_end=True
        )  # every hypothesis ends with <eos>, whose scores count too
        log_probs = model.ctc_log_probs(states, frames)[0][0]
    return hyps, scorers, states, frames, log_probs


def test_the_fused_search_keeps_the_spellers_and_the_lms_teacher_forced_score_of_each_token(recognizer):
    # Rescoring reads these instead of running the speller and the language model over the n-best again.
    model, vocabulary = recognizer
    lm = _random_lm(vocabulary)
    sos, eos = vocabulary.sos_id, vocabulary.eos_id
    hyps, _, states, frames, _ = _fused_nbest(model, vocabulary, lm, 0.6, bonus=0.2, beam=4)
    assert len(hyps) == 4 and all(h.finished for h in hyps)
    for hyp in hyps:
        targets = hyp.tokens + ([eos] if hyp.finished else [])
        forced, _ = model.score(states, frames, torch.tensor([[sos, *targets]]))  # (1, U)
        assert hyp.part_scores["attention"] == pytest.approx(forced[0].tolist(), abs=1e-4)
        lm_score = float(lm.score([hyp.tokens], sos, eos, [hyp.finished])[0])
        assert sum(hyp.part_scores["lm"]) == pytest.approx(lm_score, abs=1e-4)
        assert sum(hyp.part_scores["length"]) == len(hyp.tokens)
        fused = sum(hyp.part_scores["attention"]) + 0.6 * sum(hyp.part_scores["lm"]) + 0.2 * len(hyp.tokens)
        assert hyp.score == pytest.approx(fused, abs=1e-4)


def test_a_bfloat16_lm_scorer_gives_the_float32_log_probs_to_bf16_precision_where_the_cpu_multiplies_bf16(recognizer):
    model, vocabulary = recognizer
    lm = _random_lm(vocabulary)
    tokens = torch.tensor([vocabulary.sos_id, 5, 6])
    plain, fast = lm_scorer(lm, 0.5, 3), lm_scorer(lm, 0.5, 3, bfloat16=True)
    with torch.no_grad(), native_cpu_kernels():  # as in the search, where oneDNN is off for the speller
        expected, _, _ = plain.step(tokens, plain.state)
        got, state, _ = fast.step(tokens, fast.state)
    if bfloat16_is_fast():
        assert got.dtype == torch.float32 and state[0].dtype == torch.bfloat16
        assert torch.allclose(got, expected, atol=0.05) and not torch.equal(got, expected)
    else:  # without native bf16 products the switch changes nothing
        assert torch.equal(got, expected)
    assert next(lm.parameters()).dtype == torch.float32  # the caller's model stays float32
    waves, lengths = _waves(2)
    config = DecodeConfig(beam_size=3, ctc_weight=0.3, lm_weight=0.5, max_len_ratio=0.5)
    with torch.no_grad():
        hyps, _ = model.decode(waves, lengths, replace(config, lm_bfloat16=True), lm=lm)
    assert len(hyps) == 2 and all(h.part_scores["lm"] for h in hyps)


def test_ctc_rescoring_changes_each_score_by_exactly_weight_times_the_lm(recognizer):
    model, vocabulary = recognizer
    lm, weight = _random_lm(vocabulary), 0.6
    sos, eos = vocabulary.sos_id, vocabulary.eos_id
    hyps, scorers, _, _, log_probs = _fused_nbest(model, vocabulary, lm, weight)
    config = DecodeConfig(ctc_weight=0.3)
    with_lm = model._rescore(hyps, log_probs, config, scorers)
    without = model._rescore(hyps, log_probs, config, WeightedScorers({"attention": scorers.scorers["attention"]}))
    before = {tuple(h.tokens): h.score for h in without}
    for hyp in hyps:
        lm_score = float(lm.score([hyp.tokens], sos, eos, [hyp.finished])[0])
        after = next(h.score for h in with_lm if h.tokens == hyp.tokens)
        assert after - before[tuple(hyp.tokens)] == pytest.approx(weight * lm_score, abs=1e-4)


def test_old_decoding_configs_without_the_fields_load():
    old = {"beam_size": 8, "val_beam_size": 4, "length_penalty": 1.0, "ctc_weight": 0.3, "max_len_ratio": 2.5}
    from shared.io.config import as_dataclass

    config = as_dataclass(DecodeConfig, old)
    assert (config.lm_weight, config.length_bonus) == (0.0, 0.0)


# ----------------------------------------------------------------------------- commands and bad input


def test_fit_lm_on_a_text_file_writes_files_that_load(files, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("The Cat sat on the MAT!\nA dog, and a log.\n\n" * 5, encoding="utf-8")
    out = tmp_path / "out"
    code = speech_attend(
        [
            "fit-lm",
            "--text-from",
            str(text),
            "--vocabulary-from",
            str(files["model"]),
            "--out",
            str(out),
            "--max-steps",
            "3",
            "--hidden",
            "16",
            "--layers",
            "1",
            "--embedding",
            "8",
            "--dev-from",
            str(text),
        ]
    )
    assert code == 0, capsys.readouterr().err
    record = json.loads((out / LM_FILES[1]).read_text())["hyper_parameters"]
    assert record["sentences"] == 10 and record["steps"] == 3 and record["dev_perplexity"] > 1
    assert record["lm"]["hidden"] == 16
    lm, _ = load_lm(out, _vocabulary())
    assert lm.config.hidden == 16
    assert "dev perplexity" in capsys.readouterr().out


def test_export_with_lm_bundles_it_and_transcribe_uses_it(files, tmp_path, capsys, monkeypatch):
    out = tmp_path / "bundle"
    assert (
        speech_attend(
            [
                "export",
                "--ckpt",
                str(files["model"]),
                "--out",
                str(out),
                "--lm",
                str(files["lm"]),
                "--lm-weight",
                "0.5",
                "--length-bonus",
                "0.25",
            ]
        )
        == 0
    )
    assert all((out / name).is_file() for name in ("model.safetensors", "config.json", *LM_FILES))
    transcriber = Transcriber.load(out)
    assert transcriber.lm is not None
    assert (transcriber.decoding.lm_weight, transcriber.decoding.length_bonus) == (0.5, 0.25)
    steps = []
    original = CharLM.step
    monkeypatch.setattr(CharLM, "step", lambda self, *args: steps.append(1) or original(self, *args))
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(out), str(files["clip"])]) == 0
    assert steps, "the bundled language model was not used in the beam"
    steps.clear()
    assert speech_attend(["transcribe", "--ckpt", str(out), "--lm-weight", "0", str(files["clip"])]) == 0
    assert not steps


def _one_line_error(capsys, argv: list[str]) -> str:
    code = speech_attend(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("speech-attend: error: "), err
    return err


def test_lm_from_another_vocabulary_is_refused_in_one_line_naming_it(files, capsys):
    err = _one_line_error(
        capsys,
        ["transcribe", "--ckpt", str(files["model"]), "--lm", str(files["foreign_lm"]), "--lm-weight", "0.5", str(files["clip"])],
    )
    assert str(files["foreign_lm"] / LM_FILES[1]) in err and "other characters" in err


@pytest.mark.parametrize("damage", ["truncated weights", "empty weights", "broken json", "weights of another size"])
def test_corrupt_lm_files_are_refused_in_one_line_naming_the_file(files, tmp_path, capsys, damage):
    import shutil

    broken = shutil.copytree(files["lm"], tmp_path / "broken")
    weights, config = broken / LM_FILES[0], broken / LM_FILES[1]
    if damage == "truncated weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "empty weights":
        weights.write_bytes(b"")
    elif damage == "broken json":
        config.write_text(config.read_text()[:40])
    else:
        data = json.loads(config.read_text())
        data["hyper_parameters"]["lm"]["hidden"] = 24
        config.write_text(json.dumps(data))
    err = _one_line_error(
        capsys, ["transcribe", "--ckpt", str(files["model"]), "--lm", str(broken), "--lm-weight", "0.3", str(files["clip"])]
    )
    named = config if damage == "broken json" else weights
    assert str(named) in err


@pytest.mark.parametrize("where", ["missing", "a file"])
def test_an_lm_path_that_is_not_a_folder_is_refused_in_one_line(files, tmp_path, capsys, where):
    path = tmp_path / "nothing" if where == "missing" else files["lm"] / LM_FILES[0]
    err = _one_line_error(
        capsys, ["transcribe", "--ckpt", str(files["model"]), "--lm", str(path), "--lm-weight", "0.3", str(files["clip"])]
    )
    assert f"{path}: not a language model folder" in err


@pytest.mark.parametrize("weight", ["-0.1", "2.5", "nan"])
def test_lm_weight_outside_0_to_2_is_a_one_line_error(files, capsys, weight):
    err = _one_line_error(
        capsys,
        ["transcribe", "--ckpt", str(files["model"]), "--lm", str(files["lm"]), f"--lm-weight={weight}", str(files["clip"])],
    )
    assert "--lm-weight must be in [0, 2]" in err


def test_export_saves_the_beam_size_as_transcribes_default(files, tmp_path, capsys):
    out = tmp_path / "wide"
    assert (
        speech_attend(["export", "--ckpt", str(files["model"]), "--out", str(out), "--lm", str(files["lm"]), "--beam-size", "5"])
        == 0
    )
    assert Transcriber.load(out).decoding.beam_size == 5
    assert Transcriber.load(out, beam_size=2).decoding.beam_size == 2  # transcribe's --beam-size still wins
    plain = tmp_path / "plain"
    assert speech_attend(["export", "--ckpt", str(files["model"]), "--out", str(plain)]) == 0
    assert Transcriber.load(plain).decoding.beam_size == Transcriber.load(files["model"]).decoding.beam_size
    err = _one_line_error(capsys, ["export", "--ckpt", str(files["model"]), "--out", str(tmp_path / "x"), "--beam-size", "0"])
    assert "--beam-size" in err and not (tmp_path / "x").exists()


@pytest.mark.parametrize("weight", ["-0.1", "1.5", "nan"])
def test_export_saves_a_ctc_weight_transcribe_overrides_and_both_refuse_one_outside_0_to_1(
    files, tmp_path, capsys, monkeypatch, weight
):
    out = tmp_path / "ctc"
    assert speech_attend(["export", "--ckpt", str(files["model"]), "--out", str(out), "--ctc-weight", "0.15"]) == 0
    assert Transcriber.load(out).decoding.ctc_weight == 0.15
    assert Transcriber.load(out).decoding.beam_size == Transcriber.load(files["model"]).decoding.beam_size  # the rest as saved
    err = _one_line_error(
        capsys, ["export", "--ckpt", str(files["model"]), "--out", str(tmp_path / "x"), f"--ctc-weight={weight}"]
    )
    assert "--ctc-weight must be in [0, 1]" in err and not (tmp_path / "x").exists()
    assert Transcriber.load(out, ctc_weight=0.5).decoding.ctc_weight == 0.5  # transcribe's --ctc-weight still wins
    loaded = []
    original = Transcriber.load.__func__
    monkeypatch.setattr(
        Transcriber, "load", classmethod(lambda cls, *a, **k: loaded.append(original(cls, *a, **k)) or loaded[-1])
    )
    assert speech_attend(["transcribe", "--ckpt", str(out), "--ctc-weight", "0", str(files["clip"])]) == 0
    assert loaded[-1].decoding.ctc_weight == 0.0
    err = _one_line_error(capsys, ["transcribe", "--ckpt", str(out), f"--ctc-weight={weight}", str(files["clip"])])
    assert "--ctc-weight must be in [0, 1]" in err


def test_lm_weight_without_any_lm_is_a_one_line_error(files, capsys):
    err = _one_line_error(capsys, ["transcribe", "--ckpt", str(files["model"]), "--lm-weight", "0.5", str(files["clip"])])
    assert "needs a language model" in err and str(files["model"]) in err


def test_export_with_an_lm_over_other_characters_is_refused(files, tmp_path, capsys):
    err = _one_line_error(
        capsys, ["export", "--ckpt", str(files["model"]), "--out", str(tmp_path / "x"), "--lm", str(files["foreign_lm"])]
    )
    assert "other characters" in err
    assert not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------- speech-attend tune


@pytest.fixture(scope="module")
def corpus(files):
    folder = files["root"] / "corpus"
    folder.mkdir()
    for split in ("dev", "test"):
        (folder / f"{split}.jsonl").write_text(json.dumps({"audio": str(files["clip"]), "text": "the cat"}) + "\n")
    return folder


def test_tune_prints_a_table_of_language_model_weights_and_the_best_on_dev(files, corpus, capsys):
    settings = [
        "lm_weight=0,length_bonus=0",
        "lm_weight=0,length_bonus=1",
        "lm_weight=0.5,length_bonus=0",
        "lm_weight=0.5,length_bonus=1",
    ]
    code = speech_attend(
        ["tune", "--model", str(files["model"]), "--lm", str(files["lm"]), "--split", f"{corpus}:dev", "--settings", *settings]
    )
    out = capsys.readouterr().out
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("lm_weight=")]
    assert len(rows) == 4 and all(len(row.split()) == 2 for row in rows)  # a setting and the split's WER
    assert "best: lm_weight=" in out and f"speech-attend export --ckpt {files['model']} --out DIR --lm {files['lm']}" in out


@pytest.mark.parametrize("argv", [["--split", "CORPUS:test"], ["--devsets", "CORPUS", "--groups", "dev,test_clean"]])
def test_tune_refuses_test_data(files, corpus, capsys, argv):
    argv = [a.replace("CORPUS", str(corpus)) for a in argv]
    code = speech_attend(["tune", "--model", str(files["model"]), "--lm", str(files["lm"]), "--settings", "-", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "refusing to tune on test data" in err and len(err.splitlines()) == 1
