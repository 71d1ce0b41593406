"""What ``transcribe`` gives people: segment and word times, confidence, no speech, and files in
the formats they load elsewhere (txt, json, srt, vtt, tsv), checked with real subtitle parsers."""

import html
import json
import math
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import srt
import torch
import webvtt

from shared import Vocabulary, beam_search
from shared.io.model_files import export_folder
from speech_attend.builtin.corpus import speak
from speech_attend.builtin.espeak import synthesize, synthesize_with_words
from speech_attend.cli import main as speech_attend
from speech_attend.infer.subtitles import parse_formats
from speech_attend.infer.timing import (
    NO_SPEECH_CONFIDENCE,
    NO_SPEECH_CTC_SHARE,
    chunk_segment,
    ctc_best_path_characters,
    ctc_forced_align,
    token_slots,
)
from speech_attend.infer.transcribe import APP, Transcriber
from speech_attend.model.features import FeatureConfig
from speech_attend.model.las import LAS, DecodeConfig, LASConfig

RATE = 16000
_CHARS = list("abcdefghijklmnopqrstuvwxyz' ")
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


def _export(folder: Path, las: LASConfig = _LAS, blank_bias: float | None = None) -> Path:
    """An untrained recognizer, exported; ``blank_bias`` makes its CTC head hear nothing but blanks."""
    torch.manual_seed(0)
    vocabulary = Vocabulary(_CHARS)
    model = LAS(las, FeatureConfig(freq_masks=0, time_masks=0), vocabulary)
    if blank_bias is not None:
        with torch.no_grad():
            model.ctc_head.weight.zero_()
            model.ctc_head.bias.zero_()
            model.ctc_head.bias[:: len(vocabulary)] = blank_bias  # slot k's blank is entry k * V
    hparams = {
        "vocabulary": vocabulary.to_dict()["tokens"],
        "las": asdict(las),
        "features": asdict(model.frontend.config),
        "decoding": asdict(DecodeConfig(beam_size=2, max_chunk_seconds=3.0)),
    }
    return export_folder(folder, APP, model.state_dict(), hparams)


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("random_model"))


_PAUSE = {}  # seconds where the speech file's pause starts and ends


@pytest.fixture(scope="module")
def speech_file(tmp_path_factory) -> Path:
    """Two phrases with a second of silence between: longer than the model's 3 s chunks, so cut at the pause."""
    first = speak("the cat sat on the mat", voice="gmw/en-US", rate=160).numpy()
    second = speak("a dog ran in the park", voice="gmw/en-US", rate=160).numpy()
    path = tmp_path_factory.mktemp("speech") / "talk.wav"
    sf.write(path, np.concatenate([first, np.zeros(RATE, dtype=np.float32), second]), RATE)
    _PAUSE.update(start=first.size / RATE, end=first.size / RATE + 1.0)
    return path


# ----------------------------------------------------------------------------- alignments


def test_ctc_forced_align_finds_the_same_path_as_torchaudio():
    from torchaudio.functional import forced_align

    generator = torch.Generator().manual_seed(0)
    for tokens in ([3, 5, 5, 7], [4], [2, 2, 2], [6, 3, 6, 3, 9, 9]):
        log_probs = torch.randn(24, 10, generator=generator).log_softmax(-1)  # (T, V)
        ours = ctc_forced_align(log_probs, tokens, blank=0)
        theirs, _ = forced_align(log_probs[None], torch.tensor([tokens], dtype=torch.int32), blank=0)
        assert torch.equal(ours, theirs[0].long()), tokens


def test_ctc_forced_align_is_none_when_the_slots_cannot_hold_the_characters():
    log_probs = torch.zeros(3, 5).log_softmax(-1)
    assert ctc_forced_align(log_probs, [2, 2, 3], blank=0) is None  # 3 labels + 1 blank between the repeat > 3 slots
    assert ctc_forced_align(log_probs, [2, 3, 4], blank=0) is not None


def test_token_slots_part_a_repeated_character_at_its_blank():
    path = torch.tensor([0, 3, 3, 0, 3, 5, 5, 5, 0])
    assert token_slots(path, blank=0) == [(1, 2), (4, 4), (5, 7)]


def _one_hot_ctc(labels: list[int], vocab: int) -> torch.Tensor:
    """CTC log-probabilities `(T, V)` that all but spell ``labels``, one label per slot."""
    log_probs = torch.full((len(labels), vocab), -20.0)
    log_probs[torch.arange(len(labels)), torch.tensor(labels)] = 0.0
    return log_probs.log_softmax(-1)


def test_word_times_come_from_the_attention_peaks_and_from_the_ctc_alignment():
    # "ab c": characters a=4, b=5, space=6, c=7; listener frames of 0.1 s, two CTC slots each.
    labels, tokens = ["a", "b", " ", "c"], [4, 5, 6, 7]
    attention = torch.zeros(4, 10)
    attention[torch.arange(4), torch.tensor([2, 3, 5, 6])] = 1.0  # a at frame 2, b at 3, space at 5, c at 6
    ctc = _one_hot_ctc([0, 0, 0, 4, 0, 5, 5, 0, 6, 0, 0, 0, 0, 7, 7, 0, 0, 0, 0, 0], 8)  # (20 slots, V)
    segment = chunk_segment("ab c", tokens, labels, [-0.1, -0.3, -0.2, -0.4], attention, 10, ctc, 5.0, 6.0, 0.1)
    a, c = segment.words
    assert (a.text, c.text) == ("ab", "c")
    assert a.attention == pytest.approx((5.2, 5.4)) and c.attention == pytest.approx((5.6, 5.7))
    assert a.ctc == pytest.approx((5.15, 5.35)) and c.ctc == pytest.approx((5.65, 5.75))
    assert (a.start, a.end) == a.ctc  # the CTC times are the default where there is a CTC head
    assert a.confidence == pytest.approx(-0.2) and c.confidence == pytest.approx(-0.4)
    assert segment.confidence == pytest.approx(-0.25)  # the mean over all its characters
    assert a.ctc_confidence == pytest.approx(0.0, abs=1e-5) and not segment.no_speech


def test_attention_word_times_keep_the_characters_in_order():
    attention = torch.zeros(3, 10)
    attention[torch.arange(3), torch.tensor([6, 2, 8])] = 1.0  # the middle character's peak jumps back
    segment = chunk_segment("a bc", [4, 6, 5], ["a", " ", "b"], [-0.1] * 3, attention, 10, None, 0.0, 1.0, 0.1)
    starts = [w.attention[0] for w in segment.words]
    assert starts == sorted(starts) and segment.words[0].ctc is None


def test_a_chunk_whose_ctc_hears_only_blanks_has_no_words():
    attention = torch.eye(3, 10)
    blanks = _one_hot_ctc([0] * 20, 8)
    segment = chunk_segment("abc", [4, 5, 7], ["a", "b", "c"], [-0.01] * 3, attention, 10, blanks, 0.0, 1.0, 0.1)
    assert segment.no_speech and segment.words == [] and segment.text == ""


def test_a_chunk_whose_ctc_reads_few_of_the_spellers_characters_has_no_words():
    # A tone that the speller spells as "are an indening" (15 characters) while the CTC head's best
    # path reads one "a": the speller invents them. The same path under a 3-character word is speech.
    ctc = _one_hot_ctc([0] * 8 + [4, 4] + [0] * 10, 8)  # best path: blanks, "a" for two slots, blanks
    assert ctc_best_path_characters(ctc, blank=0) == 1
    invented = chunk_segment("a" * 15, [4] * 15, ["a"] * 15, [-0.6] * 15, torch.eye(15, 20), 20, ctc, 0.0, 1.0, 0.05)
    heard = chunk_segment("abc", [4, 5, 7], ["a", "b", "c"], [-0.6] * 3, torch.eye(3, 20), 20, ctc, 0.0, 1.0, 0.05)
    assert invented.no_speech and invented.words == [] and invented.text == ""
    assert not heard.no_speech and [w.text for w in heard.words] == ["abc"]
    assert 15 * NO_SPEECH_CTC_SHARE > 1 > 3 * NO_SPEECH_CTC_SHARE  # what the two cases rest on


def test_without_a_ctc_head_a_chunk_the_speller_is_unsure_of_has_no_words():
    attention = torch.eye(3, 10)
    unsure = chunk_segment("abc", [4, 5, 7], ["a", "b", "c"], [NO_SPEECH_CONFIDENCE - 1] * 3, attention, 10, None, 0.0, 1.0, 0.1)
    sure = chunk_segment("abc", [4, 5, 7], ["a", "b", "c"], [-0.1] * 3, attention, 10, None, 0.0, 1.0, 0.1)
    assert unsure.no_speech and not unsure.words
    assert not sure.no_speech and [w.text for w in sure.words] == ["abc"]


def test_beam_search_token_scores_are_each_tokens_log_probability():
    # Each sequence b has its own table of next-token log-probabilities given the last token; the
    # state carries b. The four end at different steps, so done ones leave the batch (compaction).
    tables = torch.randn(4, 6, 6, generator=torch.Generator().manual_seed(1)).log_softmax(-1)  # (B, V, V)

    def step(tokens, state):
        return tables[state[:, 0], tokens], state, None

    results = beam_search(step, torch.arange(4)[:, None], 4, 3, sos=0, eos=1, max_len=torch.tensor([2, 3, 8, 12]), nbest=3)
    for b, hyps in enumerate(results):
        for hyp in hyps:
            previous = [0, *hyp.tokens]
            expected = [float(tables[b, a, t]) for a, t in zip(previous, hyp.tokens)]
            assert hyp.token_scores == pytest.approx(expected, abs=1e-5)
            eos = float(tables[b, previous[-1], 1]) if hyp.finished else 0.0
            assert sum(hyp.token_scores) + eos == pytest.approx(hyp.score, abs=1e-4)


# ----------------------------------------------------------------------------- transcribe


def test_each_chunk_cut_at_a_pause_gets_its_start_and_end_in_the_file(random_model, speech_file):
    transcriber = Transcriber.load(random_model)
    transcript = transcriber.transcribe(speech_file)
    wave, _ = sf.read(speech_file)
    segments = transcript.segments
    assert len(segments) == transcript.chunks == 2
    assert 0 <= segments[0].start < segments[0].end < segments[1].start < segments[1].end <= len(wave) / RATE
    assert segments[0].end <= _PAUSE["start"] + 0.01 and segments[1].start >= _PAUSE["end"] - 0.01  # the pause lies between
    for segment in segments:
        for word in segment.words:
            assert segment.start <= word.start <= word.end <= segment.end
            assert segment.start <= word.attention[0] <= word.attention[1] <= segment.end
            assert word.ctc is None or segment.start <= word.ctc[0] <= word.ctc[1] <= segment.end


def test_silence_comes_out_as_a_segment_with_no_words(random_model, tmp_path):
    path = tmp_path / "silence.wav"
    sf.write(path, np.zeros(2 * RATE, dtype=np.float32), RATE)
    transcript = Transcriber.load(random_model).transcribe(path)
    assert transcript.text == "" and transcript.segments
    assert all(s.no_speech and s.words == [] and s.text == "" for s in transcript.segments)


def test_speech_the_model_scores_as_no_speech_gives_no_invented_text(tmp_path, speech_file):
    deaf = _export(tmp_path / "deaf", blank_bias=30.0)  # its CTC head hears only blanks
    transcript = Transcriber.load(deaf).transcribe(speech_file)
    assert transcript.text == "" and all(s.no_speech and not s.words for s in transcript.segments)
    assert any("heard no speech" in w for w in transcript.warnings)
    assert not transcript.alignment.any()  # no characters in the alignment either


def test_a_model_without_ctc_head_still_times_words_from_attention(tmp_path, speech_file, monkeypatch):
    from speech_attend.infer import timing

    monkeypatch.setattr(timing, "NO_SPEECH_CONFIDENCE", -math.inf)  # an untrained speller is unsure of everything
    model = _export(tmp_path / "no_ctc", replace(_LAS, ctc_upsample=0))
    segments = Transcriber.load(model).transcribe(speech_file).segments
    assert any(s.words for s in segments)
    for segment in segments:
        assert segment.ctc_confidence is None
        assert all(w.ctc is None and (w.start, w.end) == w.attention for w in segment.words)


def test_json_keeps_todays_keys_and_gives_segments_words_and_confidence(random_model, speech_file, capsys):
    assert speech_attend(["transcribe", "--ckpt", str(random_model), "--json", str(speech_file)]) == 0
    [line] = capsys.readouterr().out.splitlines()
    result = json.loads(line)
    assert {"audio", "text", "duration_s", "chunks"} <= set(result)
    assert len(result["segments"]) == result["chunks"]
    words = [w for s in result["segments"] for w in s["words"]]
    assert words, "the random model writes something for speech"
    assert " ".join(s["text"] for s in result["segments"] if s["text"]) == result["text"]
    for segment in result["segments"]:
        assert {"start", "end", "text", "no_speech", "confidence", "ctc_confidence", "words"} <= set(segment)
        assert segment["no_speech"] or segment["confidence"] <= 0
    for word in words:  # the same keys for every word; "ctc" is null where the CTC head cannot hold the characters
        assert set(word) == {"word", "start", "end", "confidence", "attention", "ctc", "ctc_confidence"}
        assert word["confidence"] <= 0 and (word["ctc"] is None) == (word["ctc_confidence"] is None)


# ----------------------------------------------------------------------------- files


def test_srt_vtt_tsv_txt_and_json_files_hold_the_segments_and_parse(random_model, speech_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert (
        speech_attend(
            [
                "transcribe",
                "--ckpt",
                str(random_model),
                "--output-dir",
                str(out),
                "--output-format",
                "all",
                "--json",
                str(speech_file),
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in out.iterdir()) == [f"talk.{f}" for f in ("json", "srt", "tsv", "txt", "vtt")]
    spoken = [s for s in result["segments"] if s["text"]]
    subtitles = list(srt.parse((out / "talk.srt").read_text()))
    assert [c.content for c in subtitles] == [s["text"] for s in spoken]
    assert [c.start.total_seconds() for c in subtitles] == pytest.approx([s["start"] for s in spoken], abs=1e-3)
    assert [c.end.total_seconds() for c in subtitles] == pytest.approx([s["end"] for s in spoken], abs=1e-3)
    captions = webvtt.read(str(out / "talk.vtt"))
    assert [html.unescape(c.text) for c in captions] == [s["text"] for s in spoken]  # "<unk>" is escaped, not markup
    assert [c.start_time.in_milliseconds() / 1000 for c in captions] == pytest.approx([s["start"] for s in spoken], abs=1e-3)
    assert [c.end_time.in_milliseconds() / 1000 for c in captions] == pytest.approx([s["end"] for s in spoken], abs=1e-3)
    rows = (out / "talk.tsv").read_text().splitlines()
    assert rows[0] == "start\tend\ttext" and [r.split("\t")[2] for r in rows[1:]] == [s["text"] for s in spoken]
    assert [int(r.split("\t")[0]) for r in rows[1:]] == [round(s["start"] * 1000) for s in spoken]
    assert (out / "talk.txt").read_text().splitlines() == [s["text"] for s in spoken]
    assert json.loads((out / "talk.json").read_text()) == result


def test_srt_on_standard_output_takes_one_input(random_model, speech_file, capsys):
    assert speech_attend(["transcribe", "--ckpt", str(random_model), "--output-format", "srt", str(speech_file)]) == 0
    assert list(srt.parse(capsys.readouterr().out))
    assert (
        speech_attend(["transcribe", "--ckpt", str(random_model), "--output-format", "srt", str(speech_file), str(speech_file)])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--output-dir" in err


def test_inputs_with_the_same_name_in_different_folders_do_not_overwrite_each_other(random_model, speech_file, tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    silence = tmp_path / "b" / "talk.wav"
    sf.write(silence, np.zeros(RATE, dtype=np.float32), RATE)
    same = tmp_path / "a" / "talk.wav"
    same.write_bytes(speech_file.read_bytes())
    out = tmp_path / "out"
    assert (
        speech_attend(
            [
                "transcribe",
                "--ckpt",
                str(random_model),
                "--output-dir",
                str(out),
                "--output-format",
                "json",
                str(same),
                str(silence),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["a_talk.json", "b_talk.json"]
    assert json.loads((out / "a_talk.json").read_text())["audio"] == str(same)
    assert json.loads((out / "b_talk.json").read_text())["audio"] == str(silence)


def test_an_output_folder_that_cannot_be_written_is_one_line_before_any_decoding(tmp_path, speech_file, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    code = speech_attend(
        ["transcribe", "--ckpt", str(tmp_path / "no_model"), "--output-dir", str(blocker / "out"), str(speech_file)]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"--output-dir {blocker / 'out'}: not a folder that can be written" in err  # not the model, never loaded


def test_an_unknown_output_format_is_one_line_listing_the_formats(speech_file, capsys):
    assert speech_attend(["transcribe", "--output-format", "docx", str(speech_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'docx'" in err
    assert all(name in err for name in ("txt", "json", "srt", "vtt", "tsv", "all"))
    assert parse_formats("srt, VTT") == ["srt", "vtt"] and parse_formats("all") == ["txt", "json", "srt", "vtt", "tsv"]


@pytest.mark.parametrize("terminal, json_out, shown", [(True, False, True), (False, False, False), (True, True, False)])
def test_a_progress_bar_shows_on_a_terminal_only_and_never_with_json(
    random_model, speech_file, capsys, monkeypatch, terminal, json_out, shown
):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    args = ["transcribe", "--ckpt", str(random_model), str(speech_file), str(speech_file)] + (["--json"] if json_out else [])
    assert speech_attend(args) == 0
    captured = capsys.readouterr()
    assert ("transcribe" in captured.err and "/2 [" in captured.err) == shown
    assert len(captured.out.splitlines()) == 2  # the results themselves, unchanged
    if json_out:
        assert all(json.loads(line) for line in captured.out.splitlines())


# ----------------------------------------------------------------------------- measuring against the truth


def test_espeak_word_events_leave_the_audio_as_it_was_and_start_each_word_in_order():
    text = "the quick brown fox jumped"
    audio, words = synthesize_with_words(text, "gmw/en-US+f3", rate=150, seed=3)
    assert np.array_equal(audio, synthesize(text, "gmw/en-US+f3", rate=150, seed=3))
    assert [text[w.position : w.position + w.length] for w in words] == text.split()
    samples = [w.sample for w in words]
    assert samples == sorted(samples) and samples[-1] < audio.size
    assert 0.15 < samples[-1] / audio.size < 0.95  # the last word starts well inside the speech


def test_word_times_are_those_of_the_clip_the_corpus_would_write():
    from speech_attend.builtin import corpus
    from speech_attend.evaluate.word_times import speak_with_times

    jobs, _ = corpus.plan(
        Path("unused"), {"train": 0, "dev": 1, "test": 0}, 1000, "templates", ("espeak",)
    )  # wordnet: the same, slower
    assert jobs[0].speaker.split == "dev"
    utterance = speak_with_times(jobs[0])
    rate, pitch, volume, seed, pitch_range, word_gap = jobs[0].params
    spoken = speak(
        jobs[0].text, jobs[0].speaker.espeak_name, rate, pitch, volume, seed, pitch_range=pitch_range, word_gap=word_gap
    )
    assert np.array_equal(utterance.wave, spoken.numpy())  # the clip the corpus would write
    starts = [s for _, s in utterance.words if s is not None]
    assert starts == sorted(starts) and abs(starts[0] - utterance.onset) < 0.1  # the first word starts with the speech


def test_evaluate_measures_word_times_and_sounds_without_speech_against_the_truth(random_model, tmp_path, capsys):
    report = tmp_path / "timing.json"
    argv = ["evaluate", "--model", str(random_model), "--conditions", "timing:1x2,non-speech:1", "--max-chunk-seconds", "20"]
    argv += ["--json", str(report)]  # one chunk: a segment that starts with the file
    assert speech_attend(argv) == 0
    results = json.loads(report.read_text())
    assert results["groups"] == {}  # no group asked for, none needed
    timing = results["timing"]
    assert timing["utterances"] == 2 and timing["files"] == 1 and timing["true_words"] > 0
    assert timing["segment_start"]["n"] >= 1 and timing["segment_start"]["median_abs_s"] < 0.25
    assert timing["word_start_attention_with_substitutions"]["n"] > 0
    assert results["non_speech"]["files"] == 5 and "silence_1s" not in results["non_speech"]["with_words"]
    out = capsys.readouterr().out
    assert "segment start" in out and "sounds without speech that came out with words" in out


def test_word_times_are_scored_against_the_truth():
    from speech_attend.evaluate.word_times import Clip, Utterance, score
    from speech_attend.infer.timing import Segment, Word

    first = Utterance(np.zeros(RATE, dtype=np.float32), 0.2, [("the", 0.2), ("cat", 0.5)])
    second = Utterance(np.zeros(RATE, dtype=np.float32), 0.2, [("a", 0.2)])
    clip = Clip(Path("x.flac"), [0.0, 2.0], [first, second])
    words = [
        Word("the", 0.25, 0.4, -0.1, (0.25, 0.4), (0.3, 0.4)),
        Word("cat", 0.5, 0.7, -0.1, (0.5, 0.7), (0.6, 0.7)),
        Word("dog", 2.5, 2.7, -0.1, (2.9, 3.0), (2.55, 2.7)),
    ]
    segments = [Segment(0.2, 1.0, "the cat", words[:2]), Segment(2.1, 3.0, "dog", words[2:])]
    transcript = type("T", (), {"segments": segments})()
    results = score([clip], [transcript])
    assert results["segment_start"]["n"] == 2 and results["segment_start"]["median_abs_s"] == pytest.approx(0.05)
    assert results["matched_words"] == 2  # "the", "cat"; "dog" is a substitution for "a"
    assert results["word_start_attention"]["median_abs_s"] == pytest.approx(0.025)
    assert results["word_start_ctc"]["median_abs_s"] == pytest.approx(0.1)
    assert results["word_start_ctc_with_substitutions"]["n"] == 3
    assert results["no_speech_rate"] == 0.0 and results["utterances_with_a_segment_start"] == 1.0
    assert results["word_start_attention_with_substitutions"]["p90_abs_s"] == pytest.approx(np.percentile([0.05, 0.0, 0.7], 90))


# ----------------------------------------------------------------------------- one inference interface (both apps alike)


def test_transcribe_takes_device_and_beam_size_as_the_python_api_does(random_model, speech_file, capsys):
    from speech_attend import Transcriber as FromThePackage

    assert (
        speech_attend(
            ["transcribe", "--ckpt", str(random_model), "--device", "cpu", "--beam-size", "1", "--json", str(speech_file)]
        )
        == 0
    )
    line = json.loads(capsys.readouterr().out)
    transcriber = FromThePackage.load(random_model, device="cpu", beam_size=1)
    assert transcriber.decoding.beam_size == 1
    [transcript] = transcriber.transcribe([speech_file])
    assert transcript.to_json() == line


def test_a_folder_stands_for_its_audio_sorted_at_any_depth(random_model, speech_file, tmp_path, capsys):
    folder = tmp_path / "recordings"
    (folder / "b").mkdir(parents=True)
    copies = [folder / "b" / "z.wav", folder / "a.WAV", folder / "b" / "c.wav"]
    for copy in copies:
        copy.write_bytes(speech_file.read_bytes())
    (folder / "notes.txt").write_text("not audio")
    assert speech_attend(["transcribe", "--ckpt", str(random_model), "--json", str(folder)]) == 0
    assert [json.loads(line)["audio"] for line in capsys.readouterr().out.splitlines()] == sorted(map(str, copies))


def test_a_folder_without_audio_is_one_line_and_exit_2_before_the_model_loads(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not audio")
    code = speech_attend(["transcribe", "--ckpt", str(tmp_path / "no_model"), str(tmp_path / "empty")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{tmp_path / 'empty'}: a folder with no audio files" in err  # not the missing model: nothing was loaded


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--device", "cuda", "no CUDA GPU"),
        ("--device", "cuda:7", "no CUDA GPU"),
        ("--device", "banana", "expected cpu, cuda or cuda:N"),
        ("--beam-size", "0", "must be >= 1"),
        ("--max-chunk-seconds", "0", "must be positive"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it_before_the_model_loads(
    speech_file, tmp_path, capsys, monkeypatch, option, value, expected
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a machine with a GPU
    code = speech_attend(["transcribe", "--ckpt", str(tmp_path / "no_model"), option, value, str(speech_file)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{option} {value}" in err or f"{option} must" in err and value in err
    assert expected in err and "no_model" not in err


def test_transcriber_gives_a_list_for_a_list_and_one_transcript_for_one_path(random_model, speech_file, tmp_path):
    from speech_attend import Transcript

    silence = tmp_path / "silence.wav"
    sf.write(silence, np.zeros(RATE, dtype=np.float32), RATE)
    transcriber = Transcriber.load(random_model)
    results = transcriber.transcribe([speech_file, silence])
    assert [r.audio for r in results] == [str(speech_file), str(silence)] and all(isinstance(r, Transcript) for r in results)
    assert [r.text for r in results] == [r.text for r in transcriber.transcribe_many([speech_file, silence])]
    assert transcriber.transcribe(speech_file).text == results[0].text and results[1].text == ""


def test_transcriber_raises_for_an_unreadable_file_and_transcribe_many_goes_on(random_model, speech_file, tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_text("not audio")
    transcriber = Transcriber.load(random_model)
    with pytest.raises(ValueError, match="bad.wav"):
        transcriber.transcribe([speech_file, bad])
    first, error = transcriber.transcribe_many([speech_file, bad])
    assert isinstance(error, ValueError) and first.audio == str(speech_file)


def test_transcriber_refuses_a_device_the_machine_lacks_before_loading(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="--device cuda: this machine has no CUDA GPU"):
        Transcriber.load(tmp_path / "no_model", device="cuda")


def test_transcriber_without_a_path_loads_the_shipped_model():
    from speech_attend.infer.transcribe import SHIPPED_MODEL

    shipped = Transcriber.load(SHIPPED_MODEL).model.state_dict()
    loaded = Transcriber.load().model.state_dict()
    assert loaded.keys() == shipped.keys() and all(torch.equal(loaded[k], shipped[k]) for k in shipped)


def test_a_transcriber_of_a_loaded_model_decodes_with_its_settings_less_those_replaced(random_model, speech_file):
    from speech_attend.infer.transcribe import load_recognizer

    model = load_recognizer(random_model)
    transcriber = Transcriber(model, beam_size=1, max_chunk_seconds=None)  # None keeps the model's
    assert transcriber.model is model and transcriber.decoding == replace(model.decoding, beam_size=1)
    assert transcriber.transcribe(speech_file).text == Transcriber.load(random_model, beam_size=1).transcribe(speech_file).text
    with pytest.raises(ValueError, match="unknown DecodeConfig settings \\['beams'\\]"):
        Transcriber(model, beams=2)
    with pytest.raises(ValueError, match="--lm-weight 0.5 needs a language model"):
        Transcriber(model, lm_weight=0.5)
