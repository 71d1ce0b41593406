"""The recognizer's evaluation: the groups (``prepare devsets``), the conditions, and the ``evaluate``
and ``tune`` commands on them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from shared.io.model_files import export_folder
from speech_attend.builtin.corpus import prepare_synth
from speech_attend.builtin.wordnet_sentences import load_sentences, split_sentences
from speech_attend.cli import main as speech_attend
from speech_attend.data.audio import load_audio
from speech_attend.data.readers import read_librispeech
from speech_attend.data.text import normalize_text
from speech_attend.evaluate import devsets as devsets_module
from speech_attend.evaluate import engines
from speech_attend.evaluate.conditions import apply, parse_condition, parse_conditions
from speech_attend.evaluate.tune import parse_setting
from speech_attend.model.las import build_recognizer
from tests.helpers import TINY_SPEECH_CONFIG

HAVE_ENGINES = shutil.which("flite") is not None and shutil.which("text2wave") is not None
NO_ENGINES = "flite and festival are Debian packages (apt-get install flite festival festvox-*), not pip installs"


@pytest.fixture(scope="module")
def devsets(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("devsets") / "groups"
    devsets_module.build(out, per_group=2, seed=0, engines=HAVE_ENGINES, human=None)
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


def test_espeak_only_writes_a_group_of_other_clips_and_nothing_else(devsets, tmp_path, capsys):
    argv = ["prepare", "devsets", "--out", str(tmp_path / "larger"), "--per-group", "3", "--seed", "7", "--espeak-only"]
    assert speech_attend(argv) == 0
    assert "speech-attend evaluate --model MODEL --devsets" in capsys.readouterr().out
    groups = json.loads((tmp_path / "larger" / "devsets.json").read_text())["groups"]
    assert list(groups) == ["espeak_unseen"]
    assert sorted(p.name for p in (tmp_path / "larger").iterdir()) == ["devsets.json", "espeak_unseen"]
    larger = read_librispeech(tmp_path / "larger", ["espeak_unseen"])
    assert len(larger) == 3
    assert {u.text for u in larger} != {u.text for u in read_librispeech(devsets, ["espeak_unseen"])}  # another seed: other clips


def test_prepare_devsets_human_only_writes_the_human_groups_with_their_sources(tmp_path, capsys):
    out = tmp_path / "human"
    assert speech_attend(["prepare", "devsets", "--out", str(out), "--human-only"]) == 0
    printed = capsys.readouterr().out
    listing = json.loads((out / "devsets.json").read_text())
    expected = [
        g
        for g, there in (("human_alsa", devsets_module.ALSA_SOUNDS), ("human", devsets_module.POCKETSPHINX_DATA))
        if there.is_dir()
    ]
    assert sorted(listing["groups"]) == sorted(expected) or "skipped" in printed  # each left out with a note where not installed
    assert sorted(p.name for p in out.iterdir()) == sorted(["devsets.json", *listing["groups"]])  # nothing synthesised
    for group in listing["groups"]:
        utterances = read_librispeech(out, [group])
        assert utterances and [s["utterance"] for s in listing["sources"][group]] == [u.utt_id for u in utterances]


def test_training_corpus_cannot_be_written_beside_evaluation_sets(devsets):
    with pytest.raises(ValueError, match="evaluation sets"):
        prepare_synth(devsets, train=2, dev=0, test=0, progress=False)


def test_evaluation_sets_cannot_be_written_beside_a_training_corpus(tmp_path, capsys):
    synth_corpus = prepare_synth(tmp_path / "corpus", train=1, dev=0, test=0, progress=False)
    assert speech_attend(["prepare", "devsets", "--out", str(synth_corpus), "--per-group", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("speech-attend: error:") and "holds a training corpus" in err and len(err.splitlines()) == 1
    with pytest.raises(ValueError, match="holds a training corpus"):
        engines.build_engine_groups(synth_corpus, ["flite"], 1, 0)


@pytest.mark.skipif(not HAVE_ENGINES, reason=NO_ENGINES)
def test_engine_groups_speak_dev_sentences_with_each_engine(tmp_path):
    out = tmp_path / "engines"
    assert sorted(engines.build_engine_groups(out, ["flite", "festival"], 2, 0)) == ["festival", "flite"]
    for engine, first_speaker in (("flite", 7000), ("festival", 7100)):
        utterances = read_librispeech(out, [engine])
        assert len(utterances) == 2 and all(int(u.speaker) >= first_speaker for u in utterances)


def test_engine_voices_are_named_by_their_speaker_ids():
    assert engines.voice_of("flite", "7000") == "slt" and engines.voice_of("festival", "7101") == "ked_diphone"
    assert engines.voice_of("flite", "7005") is None and engines.voice_of("flite", "") is None
    assert engines.voice_of("espeak_unseen", "7013") is None  # eSpeak's ids run into the engines' numbers


def test_engine_groups_without_the_programs_name_the_debian_packages(tmp_path, monkeypatch):
    monkeypatch.setattr(engines.shutil, "which", lambda name: None)
    with pytest.raises(engines.EngineMissing) as missing:
        engines.build_engine_groups(tmp_path / "e", ["flite", "festival"], 1, 0)
    assert len(str(missing.value).splitlines()) == 1
    for package in ("flite", "festival", "festvox-kallpc16k", "festvox-kdlpc16k", "festvox-us-slt-hts"):
        assert package in str(missing.value)


# ----------------------------------------------------------------------------- the conditions


def _written(wave: np.ndarray, path: Path) -> np.ndarray:
    """``wave`` as a 16-bit file holds it."""
    sf.write(path, wave, 16000, subtype="PCM_16")
    return sf.read(path)[0]


def test_babble_at_10_db_is_the_devsets_own_group_and_other_levels_the_same_babble_quieter(devsets, tmp_path):
    utterances = sorted(read_librispeech(devsets, ["espeak_unseen"]), key=lambda u: Path(u.audio_path))
    waves = [load_audio(u.audio_path, 16000) for u in utterances]
    at10, at30 = apply(parse_condition("babble:10"), waves, seed=0), apply(parse_condition("babble:30"), waves, seed=0)
    for u, wave, b10, b30 in zip(utterances, waves, at10, at30):
        own = sf.read(Path(u.audio_path.replace("espeak_unseen", "espeak_babble10")))[0]
        assert np.array_equal(_written(b10, tmp_path / "b10.flac"), own)  # sample for sample
        babble10, babble30 = b10 - wave.numpy(), b30 - wave.numpy()
        assert 15 < 10 * np.log10(np.mean(babble10**2) / np.mean(babble30**2)) < 25
    rooms = apply(parse_condition("room"), waves, seed=0)
    for u, room in zip(utterances, rooms):  # the devsets' espeak_reverb: the room's draws are seed + 1
        assert np.array_equal(
            _written(room, tmp_path / "r.flac"), sf.read(u.audio_path.replace("espeak_unseen", "espeak_reverb"))[0]
        )


def test_white_noise_is_flat_across_the_band_at_its_snr(devsets):
    waves = [load_audio(u.audio_path, 16000) for u in read_librispeech(devsets, ["piper_unseen"])]
    for wave, noisy in zip(waves, apply(parse_condition("white:20"), waves, seed=0)):
        noise = noisy - wave.numpy()
        spectrum = np.abs(np.fft.rfft(noise)) ** 2
        low, high = spectrum[: spectrum.size // 4].mean(), spectrum[-spectrum.size // 4 :].mean()
        assert 0.7 < low / high < 1.4
        assert 15 < 10 * np.log10(np.mean(wave.numpy() ** 2) / np.mean(noise**2)) < 30


def test_offsets_and_levels_are_written_as_a_sound_card_would():
    wave = torch.linspace(-0.8, 0.8, 1600)
    dc = apply(parse_condition("dc:0.3"), [wave], seed=0)[0]
    assert np.allclose(dc, np.clip(0.5 * wave.numpy() + 0.3, -1, 1)) and dc.max() <= 1.0
    quiet = apply(parse_condition("level:-50"), [wave], seed=0)[0]
    assert np.allclose(quiet, wave.numpy() * 10 ** (-50 / 20))
    assert apply(parse_condition("level:20"), [wave], seed=0)[0].max() == 1.0  # clipped at full scale


def test_conditions_run_clean_first_and_gather_the_sounds_without_speech():
    names = [c.name for c in parse_conditions("level:-50,babble:10,timing:2x3,non-speech:1,non-speech:5,level:-50")]
    assert names == ["clean", "level:-50", "babble:10", "timing:2x3", "non-speech"]
    last = parse_conditions("non-speech:1,non-speech:5")[-1]
    assert last.seconds == (1.0, 5.0)
    assert [c.name for c in parse_conditions("timing")] == ["timing"]  # no group, no clean
    assert (parse_condition("long").clips_per_file, parse_condition("long:3").clips_per_file) == (10, 3)
    for bad in ("babble", "babble:ten", "-50 dB", "long:0", "timing:3", "nope"):
        with pytest.raises(ValueError, match="is not a condition"):
            parse_condition(bad)


# ----------------------------------------------------------------------------- speech-attend evaluate and tune


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """An untrained tiny recognizer, exported: it errs, and the plumbing is what counts."""
    config = {
        "vocabulary": list("abcdefghijklmnopqrstuvwxyz' "),
        "las": TINY_SPEECH_CONFIG["model"]["las"],
        "decoding": {"beam_size": 1, "max_len_ratio": 0.5},
        "features": {},
    }
    folder = tmp_path_factory.mktemp("model") / "model"
    export_folder(folder, "speech-attend", build_recognizer(config).state_dict(), config)
    return folder


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_evaluate_prints_a_table_of_every_group(devsets, model, capsys):
    groups = ["espeak_reverb", "piper_unseen"]
    assert (
        speech_attend(["evaluate", "--model", str(model), "--devsets", str(devsets), "--groups", ",".join(groups), "--json", "-"])
        == 0
    )
    results = _json(capsys)
    assert results["model"] == str(model) and list(results["groups"]) == groups
    for by_condition in results["groups"].values():
        (r,) = by_condition.values()
        assert r["utterances"] == 2 and np.isfinite(r["wer"]) and np.isfinite(r["cer"]) and r["failed"] == 0
        assert "wer_ratio" not in r  # clean alone: nothing to set against it
    assert speech_attend(["evaluate", "--model", str(model), "--devsets", str(devsets), "--groups", "espeak_unseen"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:5] == ["group", "condition", "utts", "WER", "CER"]
    assert table[1].split()[:3] == ["espeak_unseen", "clean", "2"]
    argv = [
        "evaluate",
        "--model",
        str(model),
        "--devsets",
        str(devsets),
        "--groups",
        "espeak_unseen",
        "--by-speaker",
        "--json",
        "-",
    ]
    assert speech_attend(argv) == 0
    group = _json(capsys)["groups"]["espeak_unseen"]["clean"]
    speakers = {u.speaker for u in read_librispeech(devsets, ["espeak_unseen"])}
    assert set(group["speakers"]) == speakers and sum(s["utterances"] for s in group["speakers"].values()) == group["utterances"]
    assert speech_attend(["evaluate", "--model", str(model), "--devsets", str(devsets), "--groups", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and err.startswith("speech-attend: error:") and len(err.strip().splitlines()) == 1


def test_evaluate_gives_each_condition_s_wer_ratio_to_clean_with_its_interval(devsets, model, tmp_path, capsys):
    report = tmp_path / "results.json"
    argv = ["evaluate", "--model", str(model), "--devsets", str(devsets), "--groups", "espeak_unseen,piper_unseen"]
    assert speech_attend([*argv, "--conditions", "dc:0.3,level:-50,babble:10", "--json", str(report)]) == 0
    assert "espeak_unseen" in capsys.readouterr().out  # the table, and the file beside it
    by_condition = json.loads(report.read_text())["groups"]["espeak_unseen"]
    assert list(by_condition) == ["clean", "dc:0.3", "level:-50", "babble:10"]  # clean first: the ratios' reference
    assert by_condition["clean"]["wer_ratio"] == 1.0 and by_condition["clean"]["wer_ratio_95"] == [1.0, 1.0]
    for r in by_condition.values():
        low, high = r["wer_ratio_95"]
        assert r["wer_ratio"] == pytest.approx(r["wer"] / by_condition["clean"]["wer"]) and low <= r["wer_ratio"] <= high
        assert r["utterances"] == 2
    assert speech_attend([*argv, "--conditions", "level:-50", "--json", "-"]) == 0
    only = _json(capsys)["groups"]["espeak_unseen"]
    assert list(only) == ["clean", "level:-50"]
    assert only["level:-50"]["wer"] == by_condition["level:-50"]["wer"]
    assert only["level:-50"]["wer_ratio"] == by_condition["level:-50"]["wer_ratio"]
    assert speech_attend([*argv, "--conditions", "-60 dB"]) == 2
    assert "'-60 dB' is not a condition" in capsys.readouterr().err
    missing = tmp_path / "no_model"
    assert speech_attend(["evaluate", "--model", str(missing), "--devsets", str(devsets)]) == 2
    assert f"{missing}: checkpoint not found" in capsys.readouterr().err


def test_evaluate_joins_each_speaker_s_clips_into_long_files(devsets, model, capsys):
    argv = ["evaluate", "--model", str(model), "--devsets", str(devsets), "--groups", "espeak_unseen", "--conditions", "long:2"]
    assert speech_attend([*argv, "--json", "-"]) == 0
    by_condition = _json(capsys)["groups"]["espeak_unseen"]
    speakers = [u.speaker for u in read_librispeech(devsets, ["espeak_unseen"])]
    files = sum(-(-speakers.count(s) // 2) for s in set(speakers))
    assert list(by_condition) == ["clean", "long:2"] and by_condition["long:2"]["files"] == files
    assert by_condition["long:2"]["chunks"] >= files and by_condition["long:2"]["audio_seconds"] > 0


def test_tune_scores_each_setting_against_the_first_with_a_bootstrap_interval(devsets, model, capsys):
    argv = ["tune", "--model", str(model), "--devsets", str(devsets), "--groups", "espeak_unseen,piper_unseen"]
    assert (
        speech_attend([*argv, "--settings", "-", "-", "beam_size=2", "--split", f"{devsets}:espeak_reverb", "--json", "-"]) == 0
    )
    out = _json(capsys)
    base, same, wider = out["results"]
    assert (
        "difference_95" not in base and same["wer"] == base["wer"] and same["difference_95"] == [0.0, 0.0]
    )  # one decoding, twice
    assert wider["setting"] == {"beam_size": 2}
    low, high = wider["difference_95"]
    assert low <= high and base["mean"] == pytest.approx(sum(base["wer"].values()) / 2)
    assert all(0 <= r["split_wer"] for r in out["results"]) and out["best"] in out["results"]
    assert speech_attend([*argv, "--settings", "-", "beam_size=2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["setting", "espeak_uns", "piper_unse"] and any(line.startswith("best: ") for line in lines)
    assert speech_attend([*argv, "--settings", "beam=3"]) == 2
    assert "--settings 'beam=3'" in capsys.readouterr().err
    assert parse_setting("beam_size=48,ctc_weight=0.15") == {"beam_size": 48, "ctc_weight": 0.15}


def _fake_alsa_sounds(folder: Path, clips: list[str]) -> Path:
    """alsa-utils' layout: 48 kHz 16-bit mono WAVs named by the words they speak."""
    folder.mkdir()
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(48000) / 48000)
    for clip in clips:
        sf.write(folder / f"{clip}.wav", tone, 48000, subtype="PCM_16")
    return folder


def test_human_group_takes_each_alsa_clip_s_words_from_its_name(tmp_path):
    sounds = _fake_alsa_sounds(tmp_path / "alsa", devsets_module._ALSA_CLIPS + ["Noise"])
    out = tmp_path / "groups"
    groups = devsets_module.build(out, per_group=1, seed=0, engines=False, human=sounds)
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
    sounds = _fake_alsa_sounds(tmp_path / "alsa", devsets_module._ALSA_CLIPS[:3])  # a partial install
    groups = devsets_module.build(tmp_path / "groups", per_group=1, seed=0, engines=False, human=sounds)
    assert "human_alsa" not in groups and not (tmp_path / "groups" / "human_alsa").exists()
    assert "human_alsa skipped" in capsys.readouterr().out


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
    sounds = _fake_alsa_sounds(tmp_path / "alsa", devsets_module._ALSA_CLIPS)
    package, committed = _fake_pocketsphinx_data(tmp_path / "ps"), _fake_committed_clips(tmp_path / "ours")
    groups = devsets_module.build(
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
    sounds = _fake_alsa_sounds(tmp_path / "alsa", devsets_module._ALSA_CLIPS)
    groups = devsets_module.build(
        out, per_group=1, seed=0, engines=False, human=sounds, pocketsphinx=tmp_path / "not_installed", human_only=True
    )
    assert list(groups) == ["human_alsa"] and not (out / "human").exists()
    assert "human" not in json.loads((out / "devsets.json").read_text())["sources"]
    note = capsys.readouterr().out
    assert "human skipped" in note and "apt-get install pocketsphinx-testdata" in note


def test_committed_human_clips_are_16_khz_flac_with_normalised_words_and_a_licence():
    clips = json.loads((devsets_module.HUMAN_SPEECH / "clips.json").read_text())
    readme = (devsets_module.HUMAN_SPEECH / "README.md").read_text()
    for clip in clips:
        info = sf.info(devsets_module.HUMAN_SPEECH / clip["file"])
        assert (info.samplerate, info.channels, info.format) == (16000, 1, "FLAC")
        assert clip["text"] == normalize_text(clip["text"]).upper() and clip["licence"]
        assert all(clip[key] in readme for key in ("file", "repository", "path", "text"))
    assert sum(p.stat().st_size for p in devsets_module.HUMAN_SPEECH.iterdir()) < 3_000_000
