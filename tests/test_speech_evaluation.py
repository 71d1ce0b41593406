"""Evaluation groups: the engine dev set, every group in one folder, and the WER/CER table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import engine_devset
import eval_speech
import numpy as np
import pytest
import recording_check
import soundfile as sf
import speech_devsets
from tiny import TINY_SPEECH_CONFIG

from shared.io.model_files import export_folder
from speech_attend.builtin.corpus import prepare_synth
from speech_attend.builtin.wordnet_sentences import load_sentences, split_sentences
from speech_attend.data.readers import read_librispeech
from speech_attend.data.text import normalize_text
from speech_attend.model.las import build_recognizer

HAVE_ENGINES = shutil.which("flite") is not None and shutil.which("text2wave") is not None
NO_ENGINES = "flite and festival are Debian packages (apt-get install flite festival festvox-*), not pip installs"


@pytest.fixture(scope="module")
def devsets(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("devsets") / "groups"
    speech_devsets.build(out, per_group=2, seed=0, engines=HAVE_ENGINES, human=None)
    return out


def test_devsets_build_every_group_as_a_readable_corpus(devsets):
    groups = json.loads((devsets / "devsets.json").read_text())["groups"]
    expected = ["espeak_unseen", "piper_unseen", "espeak_babble10", "espeak_reverb"] + (
        ["flite", "festival"] if HAVE_ENGINES else []
    )
    assert sorted(groups) == sorted(expected)
    dev_sentences = set(split_sentences(load_sentences())["dev"])
    clean = {u.utt_id: sf.read(u.audio_path)[0] for u in read_librispeech(devsets, ["espeak_unseen"])}
    for group in groups:
        utterances = read_librispeech(devsets, [group])
        assert len(utterances) == 2
        for u in utterances:
            assert u.text.lower() in dev_sentences
            wave, rate = sf.read(u.audio_path)
            assert rate == 16000 and np.isfinite(wave).all() and 0.05 < np.abs(wave).max() < 0.99
            if group in ("espeak_babble10", "espeak_reverb"):
                assert len(wave) == len(clean[u.utt_id]) and not np.allclose(wave, clean[u.utt_id], atol=1e-3)
    assert not (devsets / "train").exists()


def test_espeak_only_writes_a_group_of_other_clips_and_nothing_else(devsets, tmp_path):
    assert speech_devsets.main(["--out", str(tmp_path / "larger"), "--per-group", "3", "--seed", "7", "--espeak-only"]) == 0
    groups = json.loads((tmp_path / "larger" / "devsets.json").read_text())["groups"]
    assert list(groups) == ["espeak_unseen"]
    assert sorted(p.name for p in (tmp_path / "larger").iterdir()) == ["devsets.json", "espeak_unseen"]
    larger = read_librispeech(tmp_path / "larger", ["espeak_unseen"])
    assert len(larger) == 3
    assert {u.text for u in larger} != {u.text for u in read_librispeech(devsets, ["espeak_unseen"])}  # another seed: other clips


def test_training_corpus_cannot_be_written_beside_evaluation_sets(devsets):
    with pytest.raises(ValueError, match="evaluation sets"):
        prepare_synth(devsets, train=2, dev=0, test=0, progress=False)


@pytest.mark.skipif(not HAVE_ENGINES, reason=NO_ENGINES)
def test_engine_devset_speaks_dev_sentences_with_each_engine(tmp_path):
    out = tmp_path / "engines"
    assert engine_devset.main(["--out", str(out), "--count", "2"]) == 0
    for engine, first_speaker in (("flite", 7000), ("festival", 7100)):
        utterances = read_librispeech(out, [engine])
        assert len(utterances) == 2 and all(int(u.speaker) >= first_speaker for u in utterances)
    synth_corpus = tmp_path / "corpus"
    prepare_synth(synth_corpus, train=1, dev=0, test=0, progress=False)
    assert engine_devset.main(["--out", str(synth_corpus), "--count", "1"]) == 2  # never beside training data


def test_engine_voices_are_named_by_their_speaker_ids():
    assert engine_devset.voice_of("flite", "7000") == "slt" and engine_devset.voice_of("festival", "7101") == "ked_diphone"
    assert engine_devset.voice_of("flite", "7005") is None and engine_devset.voice_of("flite", "") is None
    assert engine_devset.voice_of("espeak_unseen", "7013") is None  # eSpeak's ids run into the engines' numbers


def test_engine_devset_without_the_programs_names_the_debian_packages(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine_devset.shutil, "which", lambda name: None)
    assert engine_devset.main(["--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    for package in ("flite", "festival", "festvox-kallpc16k", "festvox-kdlpc16k", "festvox-us-slt-hts"):
        assert package in err


def test_eval_speech_prints_a_table_of_every_group(devsets, tmp_path, capsys):
    config = {
        "vocabulary": list("abcdefghijklmnopqrstuvwxyz' "),
        "las": TINY_SPEECH_CONFIG["model"]["las"],
        "decoding": {"beam_size": 1, "max_len_ratio": 0.5},
        "features": {},
    }
    model = build_recognizer(config)
    export_folder(tmp_path / "model", "speech-attend", model.state_dict(), config)  # untrained: the plumbing is what counts
    groups = ["espeak_reverb", "piper_unseen"]
    assert (
        eval_speech.main(["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--groups", ",".join(groups), "--json"])
        == 0
    )
    results = json.loads(capsys.readouterr().out)
    assert list(results) == groups
    for r in results.values():
        assert r["utterances"] == 2 and np.isfinite(r["wer"]) and np.isfinite(r["cer"]) and r["failed"] == 0
    assert eval_speech.main(["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--groups", "espeak_unseen"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["group", "utts", "WER", "CER"] and table[1].split()[:2] == ["espeak_unseen", "2"]
    assert (
        eval_speech.main(
            ["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--groups", "espeak_unseen", "--by-speaker", "--json"]
        )
        == 0
    )
    group = json.loads(capsys.readouterr().out)["espeak_unseen"]
    speakers = {u.speaker for u in read_librispeech(devsets, ["espeak_unseen"])}
    assert set(group["speakers"]) == speakers and sum(s["utterances"] for s in group["speakers"].values()) == group["utterances"]
    assert eval_speech.main(["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--groups", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_recording_check_gives_each_condition_s_wer_ratio_with_its_interval(devsets, tmp_path, capsys, monkeypatch):
    config = {
        "vocabulary": list("abcdefghijklmnopqrstuvwxyz' "),
        "las": TINY_SPEECH_CONFIG["model"]["las"],
        "decoding": {"beam_size": 1, "max_len_ratio": 0.1},
        "features": {},
    }
    export_folder(tmp_path / "model", "speech-attend", build_recognizer(config).state_dict(), config)  # untrained: it errs
    conditions = {name: recording_check.CONDITIONS[name] for name in ("clean", "dc+0.3", "-50 dB")}
    monkeypatch.setattr(recording_check, "CONDITIONS", conditions)
    assert (
        recording_check.main(
            ["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--groups", "espeak_unseen", "--json"]
        )
        == 0
    )
    by_condition = json.loads(capsys.readouterr().out)["espeak_unseen"]
    assert list(by_condition) == list(conditions)
    assert by_condition["clean"]["wer_ratio"] == 1.0 and by_condition["clean"]["wer_ratio_95"] == [1.0, 1.0]
    for r in by_condition.values():
        low, high = r["wer_ratio_95"]
        assert r["wer_ratio"] == pytest.approx(r["wer"] / by_condition["clean"]["wer"]) and low <= r["wer_ratio"] <= high
    assert recording_check.main(["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--groups", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
    assert (
        recording_check.main(
            [
                "--ckpt",
                str(tmp_path / "model"),
                "--devsets",
                str(devsets),
                "--groups",
                "espeak_unseen",
                "--conditions",
                "-50 dB",
                "--json",
            ]
        )
        == 0
    )
    only = json.loads(capsys.readouterr().out)["espeak_unseen"]
    assert list(only) == ["clean", "-50 dB"]  # clean always, first: the ratio's reference
    assert (
        only["-50 dB"]["wer"] == by_condition["-50 dB"]["wer"]
        and only["-50 dB"]["wer_ratio"] == by_condition["-50 dB"]["wer_ratio"]
    )
    assert recording_check.main(["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--conditions", "-60 dB"]) == 2
    assert "-60 dB" in capsys.readouterr().err


def _fake_alsa_sounds(folder: Path, clips: list[str]) -> Path:
    """alsa-utils' layout: 48 kHz 16-bit mono WAVs named by the words they speak."""
    folder.mkdir()
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(48000) / 48000)
    for clip in clips:
        sf.write(folder / f"{clip}.wav", tone, 48000, subtype="PCM_16")
    return folder


def test_human_group_takes_each_alsa_clip_s_words_from_its_name(tmp_path):
    sounds = _fake_alsa_sounds(tmp_path / "alsa", speech_devsets._ALSA_CLIPS + ["Noise"])
    out = tmp_path / "groups"
    groups = speech_devsets.build(out, per_group=1, seed=0, engines=False, human=sounds)
    assert "human_alsa" in groups and "human_alsa" in json.loads((out / "devsets.json").read_text())["groups"]
    utterances = read_librispeech(out, ["human_alsa"])
    assert [u.text for u in utterances] == [
        "FRONT LEFT",
        "FRONT CENTER",
        "FRONT RIGHT",
        "REAR LEFT",
        "REAR CENTER",
        "REAR RIGHT",
        "SIDE LEFT",
        "SIDE RIGHT",
    ]  # Noise.wav speaks no words
    wave, rate = sf.read(utterances[0].audio_path)
    assert rate == 16000 and len(wave) == 16000  # resampled from 48 kHz, one second


def test_human_group_without_alsa_utils_is_left_out_with_a_note(tmp_path, capsys):
    sounds = _fake_alsa_sounds(tmp_path / "alsa", speech_devsets._ALSA_CLIPS[:3])  # a partial install
    groups = speech_devsets.build(tmp_path / "groups", per_group=1, seed=0, engines=False, human=sounds)
    assert "human_alsa" not in groups and not (tmp_path / "groups" / "human_alsa").exists()
    assert "human_alsa skipped" in capsys.readouterr().out


def test_babble_curve_writes_the_devsets_babble_at_each_level_and_scores_it(devsets, tmp_path, capsys):
    import babble_curve

    config = {
        "vocabulary": list("abcdefghijklmnopqrstuvwxyz' "),
        "las": TINY_SPEECH_CONFIG["model"]["las"],
        "decoding": {"beam_size": 1, "max_len_ratio": 0.5},
        "features": {},
    }
    export_folder(tmp_path / "model", "speech-attend", build_recognizer(config).state_dict(), config)  # untrained: the plumbing
    out = tmp_path / "curve"
    assert (
        babble_curve.main(
            ["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--out", str(out), "--snrs", "10,30", "--json"]
        )
        == 0
    )
    results = json.loads(capsys.readouterr().out)
    assert list(results) == ["espeak_unseen", "espeak_babble10", "espeak_babble30"]
    assert results["espeak_unseen"]["wer_ratio"] == 1.0 and all(r["utterances"] == 2 for r in results.values())
    clean = {u.utt_id: sf.read(u.audio_path)[0] for u in read_librispeech(devsets, ["espeak_unseen"])}
    for u in read_librispeech(devsets, ["espeak_babble10"]):  # 10 dB: the devsets' own group, sample for sample
        assert np.array_equal(sf.read(out / Path(u.audio_path).relative_to(devsets))[0], sf.read(u.audio_path)[0])
    for u in read_librispeech(out, ["espeak_babble30"]):  # 30 dB: the same babble, 20 dB quieter
        babble30 = sf.read(u.audio_path)[0] - clean[u.utt_id]
        babble10 = (
            sf.read(devsets / Path(u.audio_path).relative_to(out).as_posix().replace("babble30", "babble10"))[0] - clean[u.utt_id]
        )
        assert 15 < 10 * np.log10(np.mean(babble10**2) / np.mean(babble30**2)) < 25
    assert (
        babble_curve.main(
            [
                "--ckpt",
                str(tmp_path / "model"),
                "--devsets",
                str(devsets),
                "--out",
                str(out),
                "--snrs",
                "20",
                "--noise",
                "white",
                "--source",
                "piper_unseen",
                "--json",
            ]
        )
        == 0
    )
    results = json.loads(capsys.readouterr().out)
    assert list(results) == ["piper_unseen", "piper_white20"]
    clean = {u.utt_id: sf.read(u.audio_path)[0] for u in read_librispeech(devsets, ["piper_unseen"])}
    for u in read_librispeech(out, ["piper_white20"]):  # white: flat across the band, 20 dB under the active speech
        noise = sf.read(u.audio_path)[0] - clean[u.utt_id]
        spectrum = np.abs(np.fft.rfft(noise)) ** 2
        low, high = spectrum[: spectrum.size // 4].mean(), spectrum[-spectrum.size // 4 :].mean()
        assert 0.7 < low / high < 1.4
        assert 15 < 10 * np.log10(np.mean(clean[u.utt_id] ** 2) / np.mean(noise**2)) < 30
    assert babble_curve.main(["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--snrs", "ten"]) == 2
    assert "--snrs 'ten'" in capsys.readouterr().err
    assert babble_curve.main(["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--source", "nope"]) == 2
    assert "nope: not found" in capsys.readouterr().err
    missing = tmp_path / "no_model"
    assert babble_curve.main(["--ckpt", str(missing), "--devsets", str(devsets), "--out", str(tmp_path / "none")]) == 2
    assert f"{missing}: checkpoint not found" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_decode_sweep_scores_each_setting_against_the_first_with_a_bootstrap_interval(devsets, tmp_path, capsys):
    import decode_sweep

    config = {
        "vocabulary": list("abcdefghijklmnopqrstuvwxyz' "),
        "las": TINY_SPEECH_CONFIG["model"]["las"],
        "decoding": {"beam_size": 1, "max_len_ratio": 0.5},
        "features": {},
    }
    export_folder(tmp_path / "model", "speech-attend", build_recognizer(config).state_dict(), config)  # untrained: the plumbing
    groups = "espeak_unseen,piper_unseen"
    assert (
        decode_sweep.main(
            [
                "--ckpt",
                str(tmp_path / "model"),
                "--devsets",
                str(devsets),
                "--groups",
                groups,
                "--settings",
                "-",
                "-",
                "beam_size=2",
                "--split",
                f"{devsets}:espeak_reverb",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    base, same, wider = out["results"]
    assert (
        "difference_95" not in base and same["wer"] == base["wer"] and same["difference_95"] == [0.0, 0.0]
    )  # one decoding, twice
    assert wider["setting"] == {"beam_size": 2}
    low, high = wider["difference_95"]
    assert low <= high and base["mean"] == pytest.approx(sum(base["wer"].values()) / 2)
    assert all(0 <= r["split_wer"] for r in out["results"])
    assert decode_sweep.main(["--ckpt", str(tmp_path / "model"), "--devsets", str(devsets), "--settings", "beam=3"]) == 2
    assert "--settings 'beam=3'" in capsys.readouterr().err
    assert decode_sweep.parse_setting("beam_size=48,ctc_weight=0.15") == {"beam_size": 48, "ctc_weight": 0.15}


def _fake_pocketsphinx_data(folder: Path) -> Path:
    """pocketsphinx-testdata's layout: 16 kHz WAVs with transcription files, and headerless .raw clips
    (16 kHz 16-bit mono little-endian); here each clip is a 0.5-s tone."""
    tone = (0.3 * np.sin(2 * np.pi * 220 * np.arange(8000) / 16000) * 32767).astype("<i2")
    (folder / "cards").mkdir(parents=True)
    (folder / "librivox").mkdir()
    (folder / "tidigits").mkdir()
    for wav in ("cards/001.wav", "cards/002.wav", "librivox/sense_and_sensibility_01_austen_64kb-0880.wav"):
        sf.write(folder / wav, tone, 16000, subtype="PCM_16")
    (folder / "cards" / "cards.transcription").write_text("<s> ten of clubs  </s> (001)\n<s> four queen of clubs  </s> (002)\n")
    (folder / "librivox" / "transcription").write_text(
        "<s> he was not an ill disposed young man </s> (sense_and_sensibility_01_austen_64kb-0880)\n"
    )
    for raw in ("goforward.raw", "tidigits/dhd.2934z.raw"):
        tone.tofile(folder / raw)
    return folder


def _fake_committed_clips(folder: Path) -> Path:
    folder.mkdir()
    sf.write(folder / "talk.flac", 0.3 * np.sin(2 * np.pi * 150 * np.arange(24000) / 48000), 48000, subtype="PCM_16")
    clips = [
        {
            "file": "talk.flac",
            "text": "Ask not what your country can do for you",
            "repository": "someone/repo",
            "path": "tests/talk.flac",
            "commit": "0123456789abcdef0123456789abcdef01234567",
            "licence": "MIT",
        }
    ]
    (folder / "clips.json").write_text(json.dumps(clips))
    return folder


def test_human_group_gathers_every_source_as_its_own_speaker_with_its_source(tmp_path):
    out = tmp_path / "groups"
    sounds = _fake_alsa_sounds(tmp_path / "alsa", speech_devsets._ALSA_CLIPS)
    package, committed = _fake_pocketsphinx_data(tmp_path / "ps"), _fake_committed_clips(tmp_path / "ours")
    groups = speech_devsets.build(
        out, per_group=1, seed=0, engines=False, human=sounds, pocketsphinx=package, human_speech=committed, human_only=True
    )
    assert sorted(groups) == ["human", "human_alsa"] and sorted(p.name for p in out.iterdir()) == [
        "devsets.json",
        "human",
        "human_alsa",
    ]
    utterances = read_librispeech(out, ["human"])
    assert [(u.utt_id, u.text) for u in utterances[7:]] == [
        ("1-1-0007", "SIDE RIGHT"),
        ("2-1-0000", "TEN OF CLUBS"),
        ("2-1-0001", "FOUR QUEEN OF CLUBS"),
        ("3-1-0000", "HE WAS NOT AN ILL DISPOSED YOUNG MAN"),
        ("4-1-0000", "GO FORWARD TEN METERS"),
        ("5-1-0000", "TWO NINE THREE FOUR ZERO"),
        ("6-1-0000", "ASK NOT WHAT YOUR COUNTRY CAN DO FOR YOU"),
    ]
    assert [u.text for u in utterances[:8]] == [u.text for u in read_librispeech(out, ["human_alsa"])]
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(8000) / 16000)
    for u in utterances[8:-1]:  # the package's clips, .wav and .raw alike: 0.5 s at 16 kHz, read little-endian
        wave, rate = sf.read(u.audio_path)
        assert rate == 16000 and np.allclose(wave, tone, atol=1e-3), u.utt_id
    wave, rate = sf.read(utterances[-1].audio_path)
    assert rate == 16000 and len(wave) == 8000  # resampled from 48 kHz
    sources = json.loads((out / "devsets.json").read_text())["sources"]
    assert sources["human"][7:] == [
        {"utterance": "1-1-0007", "source": "alsa-utils: Side_Right.wav", "licence": "GPL-2 (alsa-utils)"},
        {
            "utterance": "2-1-0000",
            "source": "pocketsphinx-testdata: cards/001.wav",
            "licence": "BSD-2-Clause (pocketsphinx-testdata)",
        },
        {
            "utterance": "2-1-0001",
            "source": "pocketsphinx-testdata: cards/002.wav",
            "licence": "BSD-2-Clause (pocketsphinx-testdata)",
        },
        {
            "utterance": "3-1-0000",
            "source": "pocketsphinx-testdata: librivox/sense_and_sensibility_01_austen_64kb-0880.wav",
            "licence": "BSD-2-Clause (pocketsphinx-testdata)",
        },
        {
            "utterance": "4-1-0000",
            "source": "pocketsphinx-testdata: goforward.raw",
            "licence": "BSD-2-Clause (pocketsphinx-testdata)",
        },
        {
            "utterance": "5-1-0000",
            "source": "pocketsphinx-testdata: tidigits/dhd.2934z.raw",
            "licence": "BSD-2-Clause (pocketsphinx-testdata)",
        },
        {"utterance": "6-1-0000", "source": "someone/repo:tests/talk.flac@01234567", "licence": "MIT"},
    ]
    assert [s["utterance"] for s in sources["human_alsa"]] == [u.utt_id for u in read_librispeech(out, ["human_alsa"])]


def test_human_group_without_pocketsphinx_testdata_is_left_out_with_a_note(tmp_path, capsys):
    out = tmp_path / "groups"
    sounds = _fake_alsa_sounds(tmp_path / "alsa", speech_devsets._ALSA_CLIPS)
    groups = speech_devsets.build(
        out, per_group=1, seed=0, engines=False, human=sounds, pocketsphinx=tmp_path / "not_installed", human_only=True
    )
    assert list(groups) == ["human_alsa"] and not (out / "human").exists()
    assert "human" not in json.loads((out / "devsets.json").read_text())["sources"]
    note = capsys.readouterr().out
    assert "human skipped" in note and "apt-get install pocketsphinx-testdata" in note


def test_committed_human_clips_are_16_khz_flac_with_normalised_words_and_a_licence():
    clips = json.loads((speech_devsets.HUMAN_SPEECH / "clips.json").read_text())
    readme = (speech_devsets.HUMAN_SPEECH / "README.md").read_text()
    for clip in clips:
        info = sf.info(speech_devsets.HUMAN_SPEECH / clip["file"])
        assert (info.samplerate, info.channels, info.format) == (16000, 1, "FLAC")
        assert clip["text"] == normalize_text(clip["text"]).upper() and clip["licence"]
        assert all(clip[key] in readme for key in ("file", "repository", "path", "text"))
    assert sum(p.stat().st_size for p in speech_devsets.HUMAN_SPEECH.iterdir()) < 3_000_000
