"""Speech data: audio loading, text normalisation, corpus readers and the synthetic corpus.

Every fixture is built in tmp_path in the real on-disk formats, with sine tones for audio.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speech_attend.builtin import corpus
from speech_attend.builtin import speakers as voices
from speech_attend.builtin.espeak import EspeakError, synthesize
from speech_attend.builtin.sentences import generate_sentence, generate_sentences, vocabulary
from speech_attend.data.audio import AudioError, audio_duration, load_audio
from speech_attend.data.readers import (
    CorpusError,
    read_common_voice,
    read_corpus,
    read_librispeech,
    read_manifest,
)
from speech_attend.data.text import map_out_of_vocabulary, normalize_text

CAN_WRITE_MP3 = "MP3" in sf.available_formats()


def _sine(seconds: float, sample_rate: int, freq: float = 440.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(round(seconds * sample_rate))) / sample_rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _write(path: Path, seconds: float = 0.25, sample_rate: int = 16000, freq: float = 440.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, _sine(seconds, sample_rate, freq), sample_rate)
    return path


def _dominant_frequency(wave: np.ndarray, sample_rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(wave * np.hanning(len(wave))))
    return float(np.argmax(spectrum) * sample_rate / len(wave))


# ----------------------------------------------------------------------------- audio


@pytest.mark.parametrize("suffix", [".wav", ".flac", ".ogg"] + ([".mp3"] if CAN_WRITE_MP3 else []))
def test_load_audio_reads_each_format_as_mono_float(tmp_path, suffix):
    path = _write(tmp_path / f"tone{suffix}", seconds=0.5)
    wave = load_audio(path)
    assert wave.dtype.is_floating_point and wave.dim() == 1
    # MP3 adds encoder padding; the lossless formats are exact.
    assert abs(wave.numel() - 8000) <= (2000 if suffix == ".mp3" else 0)
    assert _dominant_frequency(wave.numpy(), 16000) == pytest.approx(440, abs=4)


@pytest.mark.parametrize("rate", [8000, 44100, 48000])
def test_resampling_gives_16k_length_and_keeps_the_frequency(tmp_path, rate):
    path = tmp_path / f"tone_{rate}.flac"
    sf.write(path, _sine(1.0, rate, freq=440.0), rate)
    wave = load_audio(path, sample_rate=16000)
    assert wave.numel() == 16000
    assert _dominant_frequency(wave.numpy(), 16000) == pytest.approx(440, abs=2)


def test_stereo_and_multichannel_are_averaged_to_mono(tmp_path):
    left = _sine(0.25, 16000, 440)
    stereo = np.stack([left, 0.5 * left], axis=1)  # (T, 2)
    sf.write(tmp_path / "stereo.wav", stereo, 16000, subtype="FLOAT")
    np.testing.assert_allclose(load_audio(tmp_path / "stereo.wav").numpy(), 0.75 * left, atol=1e-6)
    six = np.repeat(left[:, None], 6, axis=1)
    sf.write(tmp_path / "six.wav", six, 16000, subtype="FLOAT")
    np.testing.assert_allclose(load_audio(tmp_path / "six.wav").numpy(), left, atol=1e-6)


def test_audio_duration_comes_from_the_header(tmp_path):
    path = tmp_path / "a.flac"
    sf.write(path, _sine(1.5, 22050), 22050)
    assert audio_duration(path) == pytest.approx(1.5)


def _bad_audio_files(tmp_path: Path) -> dict[str, Path]:
    files = {"missing": tmp_path / "missing.wav"}
    files["empty"] = tmp_path / "empty.flac"
    files["empty"].write_bytes(b"")
    files["text"] = tmp_path / "notes.wav"
    files["text"].write_text("this is not audio\n")
    good = _write(tmp_path / "good.flac", seconds=1.0)
    files["truncated"] = tmp_path / "cut.flac"
    files["truncated"].write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    files["silent_header"] = tmp_path / "zero.wav"
    sf.write(files["silent_header"], np.zeros(0, np.float32), 16000)
    if CAN_WRITE_MP3:
        mp3 = _write(tmp_path / "good.mp3", seconds=1.0)
        files["truncated_mp3"] = tmp_path / "cut.mp3"
        files["truncated_mp3"].write_bytes(mp3.read_bytes()[: mp3.stat().st_size // 3])
    return files


def test_each_bad_audio_file_raises_audio_error_naming_it(tmp_path):
    for case, path in _bad_audio_files(tmp_path).items():
        with pytest.raises(AudioError) as info:
            load_audio(path)
        message = str(info.value)
        assert str(path) in message and "\n" not in message, case
        assert isinstance(info.value, ValueError)


def test_audio_duration_raises_audio_error_for_unreadable_files(tmp_path):
    files = _bad_audio_files(tmp_path)
    for case in ("missing", "empty", "text"):
        with pytest.raises(AudioError, match=re.escape(str(files[case]))):
            audio_duration(files[case])


# ----------------------------------------------------------------------------- text


def test_normalize_text_policy():
    assert normalize_text("  Don’t   STOP -- the Café’s open!  ") == "don't stop the café's open"
    assert normalize_text("HELLO, World.", lowercase=False) == "HELLO World"
    assert normalize_text("ﬁne ＡＢＣ x²") == "fine abc x2"  # NFKC
    assert normalize_text("well-known 'quoted' ' words") == "well known 'quoted' words"
    assert normalize_text("a-b, c!", keep_punctuation="-,") == "a-b, c"
    assert normalize_text("?!...") == ""


def test_map_out_of_vocabulary_drops_or_raises():
    charset = set("abc ")
    assert map_out_of_vocabulary("abc", charset) == "abc"
    assert map_out_of_vocabulary("ab x c", charset, policy="drop") == "ab c"
    with pytest.raises(ValueError, match="'x'"):
        map_out_of_vocabulary("ab x c", charset, policy="error")
    with pytest.raises(ValueError, match="policy"):
        map_out_of_vocabulary("abc", charset, policy="replace")


# ----------------------------------------------------------------------------- LibriSpeech


def _librispeech(root: Path) -> Path:
    chapters = {
        ("train-clean-100", "19", "198"): ["NORTHANGER ABBEY", "CHAPTER ONE"],
        ("train-clean-100", "26", "495"): ["I HAD NOT THOUGHT OF THAT"],
        ("dev-clean", "84", "121123"): ["GO DO YOU HEAR", "BUT IN LESS THAN FIVE MINUTES"],
    }
    for (subset, speaker, chapter), texts in chapters.items():
        folder = root / subset / speaker / chapter
        lines = []
        for i, text in enumerate(texts):
            utt_id = f"{speaker}-{chapter}-{i:04d}"
            _write(folder / f"{utt_id}.flac", seconds=0.1)
            lines.append(f"{utt_id} {text}")
        (folder / f"{speaker}-{chapter}.trans.txt").write_text("\n".join(lines) + "\n")
    return root


def test_read_librispeech_reads_every_subset_or_the_chosen_ones(tmp_path):
    root = _librispeech(tmp_path / "LibriSpeech")
    everything = read_librispeech(root)
    assert len(everything) == 5
    train = read_librispeech(root, ["train-clean-100"])
    assert [u.utt_id for u in train] == ["19-198-0000", "19-198-0001", "26-495-0000"]
    first = train[0]
    assert first.text == "NORTHANGER ABBEY" and first.speaker == "19" and first.duration is None
    assert Path(first.audio_path).is_absolute() and Path(first.audio_path).is_file()


def test_read_librispeech_errors_name_file_and_line(tmp_path):
    root = _librispeech(tmp_path)
    transcript = root / "dev-clean" / "84" / "121123" / "84-121123.trans.txt"
    transcript.write_text("84-121123-0000 GO DO YOU HEAR\n84-121123-0001\n")
    with pytest.raises(CorpusError, match=re.escape(f"{transcript}:2")):
        read_librispeech(root, ["dev-clean"])
    transcript.write_text("84-121123-0000 GO DO YOU HEAR\n84-121123-0007 NO AUDIO HERE\n")
    with pytest.raises(CorpusError) as info:
        read_librispeech(root, ["dev-clean"])
    assert f"{transcript}:2" in str(info.value) and "84-121123-0007.flac" in str(info.value)
    with pytest.raises(CorpusError, match="test-other"):
        read_librispeech(root, ["test-other"])


# ----------------------------------------------------------------------------- Common Voice


def _common_voice(root: Path) -> Path:
    clips = root / "clips"
    _write(clips / "common_voice_en_1.wav", seconds=0.1, sample_rate=48000)
    _write(clips / "common_voice_en_2.flac", seconds=0.1, sample_rate=48000)
    rows = [
        ["client_id", "sentence", "up_votes", "path", "down_votes", "age", "accents"],
        ["abc123", "Hello, world!", "2", "common_voice_en_1.wav", "0", "", ""],
        ["def456", 'He said "yes".', "3", "common_voice_en_2.flac", "0", "twenties", "us"],
    ]
    if CAN_WRITE_MP3:
        _write(clips / "common_voice_en_3.mp3", seconds=0.2, sample_rate=48000)
        rows.append(["ghi789", "An MP3 clip.", "2", "common_voice_en_3.mp3", "1", "", ""])
    (root / "train.tsv").write_text("\n".join("\t".join(r) for r in rows) + "\n")
    return root


def test_read_common_voice_finds_columns_by_header_name(tmp_path):
    root = _common_voice(tmp_path / "cv")
    utterances = read_common_voice(root, "train")
    assert [u.text for u in utterances][:2] == ["Hello, world!", 'He said "yes".']
    assert [u.speaker for u in utterances][:2] == ["abc123", "def456"]
    assert utterances[0].utt_id == "common_voice_en_1"
    for u in utterances:
        assert load_audio(u.audio_path).numel() > 0


def test_read_common_voice_errors_name_the_tsv(tmp_path):
    root = _common_voice(tmp_path / "cv")
    tsv = root / "train.tsv"
    tsv.write_text("client_id\ttext\tpath\nabc\thello\tcommon_voice_en_1.wav\n")
    with pytest.raises(CorpusError, match=re.escape(f"{tsv}:1")):
        read_common_voice(root)
    tsv.write_text("client_id\tsentence\tpath\nabc\thello\tnot_there.mp3\n")
    with pytest.raises(CorpusError, match=re.escape(f"{tsv}:2") + ".*not_there.mp3"):
        read_common_voice(root)
    with pytest.raises(CorpusError, match="dev.tsv"):
        read_common_voice(root, "dev")


# ----------------------------------------------------------------------------- manifests


def test_read_manifest_jsonl_resolves_relative_paths_and_optional_fields(tmp_path):
    _write(tmp_path / "audio" / "a.wav")
    absolute = _write(tmp_path / "elsewhere" / "b.ogg")
    manifest = tmp_path / "train.jsonl"
    manifest.write_text(
        json.dumps({"audio": "audio/a.wav", "text": "first one", "duration": 0.25, "speaker": 7})
        + "\n\n"
        + json.dumps({"audio": str(absolute), "text": "second", "id": "utt-b"})
        + "\n"
    )
    first, second = read_manifest(manifest)
    assert first.audio_path == str((tmp_path / "audio" / "a.wav").resolve())
    assert (first.text, first.duration, first.speaker, first.utt_id) == ("first one", 0.25, "7", "a")
    assert (second.duration, second.speaker, second.utt_id) == (None, None, "utt-b")


def test_read_manifest_csv_and_tsv_by_header(tmp_path):
    _write(tmp_path / "a.flac")
    (tmp_path / "m.csv").write_text('text,duration,audio\n"hello, there",0.25,a.flac\n')
    (utt,) = read_manifest(tmp_path / "m.csv")
    assert (utt.text, utt.duration, Path(utt.audio_path).name) == ("hello, there", 0.25, "a.flac")
    (tmp_path / "m.tsv").write_text("audio\ttext\tspeaker\na.flac\thello\tspk1\n")
    (utt,) = read_manifest(tmp_path / "m.tsv")
    assert (utt.text, utt.speaker, utt.duration) == ("hello", "spk1", None)


def test_read_manifest_errors_name_file_and_line(tmp_path):
    _write(tmp_path / "a.wav")
    good = json.dumps({"audio": "a.wav", "text": "ok"})
    cases = {
        "bad json": good + "\n{not json\n",
        "missing text": good + "\n" + json.dumps({"audio": "a.wav"}) + "\n",
        "missing audio file": good + "\n" + json.dumps({"audio": "b.wav", "text": "x"}) + "\n",
        "bad duration": good + "\n" + json.dumps({"audio": "a.wav", "text": "x", "duration": "long"}) + "\n",
    }
    manifest = tmp_path / "m.jsonl"
    for content in cases.values():
        manifest.write_text(content)
        with pytest.raises(CorpusError, match=re.escape(f"{manifest}:2")):
            read_manifest(manifest)
    csv_manifest = tmp_path / "m.csv"
    csv_manifest.write_text("audio,text\na.wav,fine\na.wav,too,many\n")
    with pytest.raises(CorpusError, match=re.escape(f"{csv_manifest}:3")):
        read_manifest(csv_manifest)
    with pytest.raises(CorpusError, match="not found"):
        read_manifest(tmp_path / "absent.jsonl")


# ----------------------------------------------------------------------------- dispatch


def test_read_corpus_dispatches_on_what_the_folder_holds(tmp_path):
    libri = _librispeech(tmp_path / "libri")
    assert len(read_corpus(libri, "dev-clean")) == 2
    assert len(read_corpus(libri, "train")) == 3  # train -> every train-* subset
    nested = tmp_path / "download"
    _librispeech(nested / "LibriSpeech")
    assert len(read_corpus(nested, "dev-clean")) == 2

    cv = _common_voice(tmp_path / "cv")
    assert read_corpus(cv, "train")[0].text == "Hello, world!"

    manifests = tmp_path / "manifests"
    _write(manifests / "a.wav")
    (manifests / "dev.csv").write_text("audio,text\na.wav,from csv\n")
    (manifests / "test.tsv").write_text("audio\ttext\na.wav\tfrom tsv\n")
    (manifests / "train.jsonl").write_text(json.dumps({"audio": "a.wav", "text": "from jsonl"}) + "\n")
    assert [read_corpus(manifests, s)[0].text for s in ("train", "dev", "test")] == ["from jsonl", "from csv", "from tsv"]
    with pytest.raises(CorpusError, match="no corpus for split 'valid'"):
        read_corpus(manifests, "valid")


# ----------------------------------------------------------------------------- synthetic corpus


def test_sentence_generator_vocabulary_length_and_determinism():
    assert len(vocabulary()) >= 500
    sentences = generate_sentences(300, seed=1)
    assert sentences == generate_sentences(300, seed=1) != generate_sentences(300, seed=2)
    for sentence in sentences:
        words = sentence.split()
        assert 3 <= len(words) <= 12
        assert set(words) <= vocabulary() and re.fullmatch(r"[a-z' ]+", sentence)
    assert generate_sentence(random.Random(5)) == generate_sentence(random.Random(5))


def test_espeak_output_does_not_depend_on_what_was_spoken_before():
    first = synthesize("the old farmer slept", "gmw/en-US+f3", rate=160, pitch=40, seed=3)
    synthesize("something else entirely", "gmw/en-GB-scotland+klatt", rate=200, pitch=70)
    again = synthesize("the old farmer slept", "gmw/en-US+f3", rate=160, pitch=40, seed=3)
    assert first.dtype == np.int16 and len(first) > 0.5 * 22050
    np.testing.assert_array_equal(first, again)
    with pytest.raises(EspeakError):
        synthesize("hello", "gmw/no-such-voice")
    with pytest.raises(EspeakError, match="variant"):
        synthesize("hello", "gmw/en+no-such-variant")


def test_held_out_speakers_leave_every_accent_and_variant_in_training():
    speakers = voices.classic_espeak_speakers()
    assert len({s.speaker_id for s in speakers}) == len(voices.ACCENTS) * len(voices.VARIANTS)
    train = [s for s in speakers if s.split == "train"]
    assert {s.voice for s in train} == set(voices.ACCENTS)
    assert {s.variant for s in train} == set(voices.VARIANTS)
    held_out = len(speakers) - len(train)
    assert 0.15 <= held_out / len(speakers) <= 0.25
    assert abs(sum(s.split == "dev" for s in speakers) - sum(s.split == "test" for s in speakers)) <= 1


def _corpus_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_prepare_synth_writes_a_librispeech_tree_with_unseen_test_voices(tmp_path):
    out = corpus.prepare_synth(tmp_path / "synth", train=6, dev=2, test=2, seed=0, progress=False)
    roles = json.loads((out / "speakers.json").read_text())
    by_split = {split: read_librispeech(out, [split]) for split in corpus.SPLITS}
    assert {k: len(v) for k, v in by_split.items()} == {"train": 6, "dev": 2, "test": 2}
    train_voices = {(roles[u.speaker]["voice"], roles[u.speaker]["variant"]) for u in by_split["train"]}
    for split in ("dev", "test"):
        for u in by_split[split]:
            assert roles[u.speaker]["split"] == split
            assert (roles[u.speaker]["voice"], roles[u.speaker]["variant"]) not in train_voices
    for u in by_split["train"] + by_split["dev"]:
        assert re.fullmatch(r"\d+-\d+-\d{4}", u.utt_id) and u.text == u.text.upper()
        wave, rate = sf.read(u.audio_path)
        assert rate == 16000
        seconds_per_word = len(wave) / rate / len(u.text.split())
        assert 0.2 <= seconds_per_word <= 0.7, u
        assert 0.1 < np.abs(wave).max() < 0.99  # audible and not clipped
        assert np.sqrt(np.mean(wave**2)) > 0.01


def test_prepare_synth_is_deterministic_for_a_seed_whatever_the_workers(tmp_path, monkeypatch):
    serial = corpus.prepare_synth(tmp_path / "a", train=6, dev=2, test=2, seed=7, progress=False, workers=1)
    monkeypatch.setattr(corpus, "_SERIAL_BELOW", 0)  # force the process pool for 10 utterances
    pooled = corpus.prepare_synth(tmp_path / "b", train=6, dev=2, test=2, seed=7, progress=False, workers=2)
    assert _corpus_bytes(serial) == _corpus_bytes(pooled)
    other = corpus.prepare_synth(tmp_path / "c", train=6, dev=2, test=2, seed=8, progress=False, workers=1)
    assert _corpus_bytes(other) != _corpus_bytes(serial)


def test_prepare_synth_keeps_a_finished_corpus_and_replaces_a_different_one(tmp_path):
    out = tmp_path / "synth"
    corpus.prepare_synth(out, train=3, dev=1, test=1, progress=False)
    stamp = (out / "synth.json").stat().st_mtime_ns
    corpus.prepare_synth(out, train=3, dev=1, test=1, progress=False)
    assert (out / "synth.json").stat().st_mtime_ns == stamp
    corpus.prepare_synth(out, train=2, dev=1, test=1, progress=False)
    assert len(read_librispeech(out, ["train"])) == 2
    foreign = tmp_path / "foreign"
    (foreign / "train").mkdir(parents=True)
    with pytest.raises(ValueError, match="speakers.json"):
        corpus.prepare_synth(foreign, train=1, dev=0, test=0, progress=False)
