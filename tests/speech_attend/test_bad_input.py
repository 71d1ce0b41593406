"""Bad input to the recognizer (``speech-attend``), command by command.

Training skips an unreadable file, names it in ``skipped_samples.log`` and goes on; too many
unreadable files, or anything else a user can get wrong, end the command with one line
``speech-attend: error: ...`` that names the file or value, and exit code 2. Audio that is merely
unusual (other rates, stereo, silence, ten minutes long) must simply work.

The fit on 8 synthetic utterances with two unreadable ones is ``speech_run`` (conftest.py); the
errors both apps share are in ``tests/shared/test_bad_input.py``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from speech_attend.cli import main as speech_attend
from speech_attend.train.datamodule import SpeechDataModule
from tests.helpers import LOG_NAME, one_line_error, read_skipped_log, speech_config, synth_copy, tone, truncate

# ----------------------------------------------------------------------------- recognizer: fit and test


@pytest.mark.slow
def test_recognizer_fit_skips_and_logs_unreadable_audio_and_saves_a_checkpoint(speech_run):
    assert speech_run["code"] == 0
    logs = list(speech_run["run"].rglob(LOG_NAME))
    assert [p.relative_to(speech_run["run"]).parts[:1] for p in logs] == [("version_0",)]
    skipped = read_skipped_log(logs[0])
    assert set(skipped) == set(speech_run["bad"]) and len(logs[0].read_text().splitlines()) == 2
    for path, reason in speech_run["bad"].items():
        assert re.search(reason, skipped[path]), skipped[path]
    checkpoint = torch.load(speech_run["ckpt"], map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 2


@pytest.mark.slow
def test_recognizer_fit_with_too_many_unreadable_files_stops_in_one_line(tiny_synth, tmp_path, capsys):
    corpus, files = synth_copy(tiny_synth, tmp_path)
    for i, path in enumerate(files["train"][:4]):  # half: truncated, empty, text, and audio cut to its header
        [truncate, lambda p: p.write_bytes(b""), lambda p: p.write_text("text\n"), lambda p: truncate(p, 0.02)][i](path)
    config = speech_config(tmp_path, cache_audio=False)  # files are read in the loader, not at set-up
    run = tmp_path / "run"
    capsys.readouterr()
    code = speech_attend(
        [
            "fit",
            "--config",
            str(config),
            "--data.data_dir",
            str(corpus),
            "--trainer.default_root_dir",
            str(run),
            "--bad_samples.min_samples",
            "4",
        ]
    )
    assert code == 2
    error = one_line_error(capsys.readouterr().err, "speech-attend")
    (log,) = run.rglob(LOG_NAME)
    assert "more than the limit of 1.0%" in error and str(log) in error
    assert set(read_skipped_log(log)) <= {str(p) for p in files["train"][:4]}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["text", "zero samples", "shorter than one listener frame"])
def test_recognizer_test_leaves_out_an_unusable_test_file_and_logs_it(speech_run, tiny_synth, tmp_path, kind):
    corpus, files = synth_copy(tiny_synth, tmp_path)
    if kind == "text":
        files["test"][0].write_text("not audio\n")
    else:
        sf.write(files["test"][0], tone(0.0 if kind == "zero samples" else 0.02, 16000), 16000)
    out = tmp_path / "run"
    args = [
        "test",
        "--config",
        str(speech_run["config"]),
        "--data.data_dir",
        str(corpus),
        "--trainer.default_root_dir",
        str(out),
        "--ckpt_path",
        str(speech_run["ckpt"]),
    ]
    with pytest.warns(UserWarning, match="1 test sample"):
        assert speech_attend(args) == 0
    assert json.loads(next(out.rglob("test_metrics.json")).read_text())["items"] == 1
    (log,) = out.rglob(LOG_NAME)
    assert log.read_text().startswith(f"[test] {files['test'][0]}\t")


@pytest.mark.parametrize(
    "case, where",
    [
        ("bad json line", "train.jsonl:2"),
        ("missing text", "train.jsonl:2"),
        ("csv with an extra field", "dev.csv:3"),
        ("missing folder", "absent"),
    ],
)
def test_recognizer_fit_with_a_malformed_manifest_names_the_file_and_line(tmp_path, capsys, case, where):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sf.write(corpus / "a.wav", tone(0.5, 16000), 16000)
    good = json.dumps({"audio": "a.wav", "text": "a tone"})
    train = {"bad json line": good + "\n{not json\n", "missing text": good + "\n" + json.dumps({"audio": "a.wav"}) + "\n"}
    (corpus / "train.jsonl").write_text(train.get(case, good + "\n"))
    (corpus / "dev.csv").write_text("audio,text\na.wav,fine\n" + ("a.wav,too,many\n" if case.startswith("csv") else ""))
    if case == "missing folder":
        corpus = tmp_path / "absent"
    config = speech_config(tmp_path)
    assert (
        speech_attend(
            ["fit", "--config", str(config), "--data.data_dir", str(corpus), "--trainer.default_root_dir", str(tmp_path / "run")]
        )
        == 2
    )
    assert where in one_line_error(capsys.readouterr().err, "speech-attend")


@pytest.mark.parametrize("kind", ["missing", "empty", "text"])
def test_recognizer_test_with_a_bad_checkpoint_is_a_one_line_error(tiny_synth, tmp_path, capsys, kind):
    checkpoint = tmp_path / "model.ckpt"
    if kind != "missing":
        checkpoint.write_bytes(b"" if kind == "empty" else b"a text file, not a checkpoint\n")
    config = speech_config(tmp_path)
    code = speech_attend(
        [
            "test",
            "--config",
            str(config),
            "--data.data_dir",
            str(tiny_synth),
            "--trainer.default_root_dir",
            str(tmp_path / "run"),
            "--ckpt_path",
            str(checkpoint),
        ]
    )
    assert code == 2
    assert "model.ckpt" in one_line_error(capsys.readouterr().err, "speech-attend")


# ----------------------------------------------------------------------------- recognizer: out-of-vocabulary transcripts


def _manifest_corpus(root: Path, train: list[str], dev: list[str]) -> Path:
    root.mkdir()
    sf.write(root / "a.wav", tone(0.5, 16000), 16000)
    for split, texts in (("train", train), ("dev", dev)):
        lines = [json.dumps({"audio": "a.wav", "text": text, "id": f"{split}-{i}"}) for i, text in enumerate(texts)]
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_out_of_vocabulary_characters_are_dropped_with_one_warning(tmp_path):
    corpus = _manifest_corpus(tmp_path / "corpus", ["the cat", "a hat"], ["The café", "2 cats", "the hat"])
    datamodule = SpeechDataModule(str(corpus))
    with pytest.warns(UserWarning) as warned:
        datamodule.setup("fit")
    messages = [str(w.message) for w in warned if "outside the vocabulary" in str(w.message)]
    assert messages == [
        "2 of 3 dev transcripts have characters outside the vocabulary of the training text "
        "('2', 'f', 's', 'é'); those characters were dropped (data.oov_policy: drop)"
    ]
    assert datamodule.datasets["val"].texts == ["the ca", "cat", "the hat"]
    assert datamodule.datasets["train"].texts == ["the cat", "a hat"]


def test_out_of_vocabulary_characters_under_the_error_policy_name_the_utterance(tmp_path):
    corpus = _manifest_corpus(tmp_path / "corpus", ["the cat", "a hat"], ["the hat", "The café"])
    with pytest.raises(ValueError) as error:
        SpeechDataModule(str(corpus), oov_policy="error").setup("fit")
    message = str(error.value)
    assert "\n" not in message and message.startswith(str((corpus / "a.wav").resolve()))
    assert "dev-1" in message and "'f', 'é'" in message
    with pytest.raises(ValueError, match="oov_policy must be one of drop, error, got 'replace'"):
        SpeechDataModule(str(corpus), oov_policy="replace")


def test_training_leaves_out_audio_with_no_samples_or_shorter_than_min_duration(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, seconds in (("ok.wav", 0.5), ("no_samples.wav", 0.0), ("blip.wav", 0.02)):
        sf.write(corpus / name, tone(seconds, 16000), 16000)
    lines = [json.dumps({"audio": name, "text": "a tone"}) for name in ("ok.wav", "no_samples.wav", "blip.wav")]
    for split in ("train", "dev"):
        (corpus / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    datamodule = SpeechDataModule(str(corpus), min_duration=0.1)
    datamodule.setup("fit")
    assert [Path(u.audio_path).name for u in datamodule.datasets["train"].utterances] == ["ok.wav"]
    assert len(datamodule.datasets["val"]) == 3  # evaluation keeps every utterance; unreadable ones are skipped per batch


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["drop", "error"])
def test_recognizer_test_applies_the_policy_with_the_checkpoint_vocabulary(speech_run, tiny_synth, tmp_path, capsys, policy):
    corpus, _ = synth_copy(tiny_synth, tmp_path)
    spoken = [
        line.split(" ", 1)[1] for t in sorted((corpus / "train").rglob("*.trans.txt")) for line in t.read_text().splitlines()
    ]
    transcripts = sorted((corpus / "test").rglob("*.trans.txt"))
    ids = [line.split()[0] for t in transcripts for line in t.read_text().splitlines()]
    for transcript in transcripts:  # test texts taken from the training text, so only the added characters are new
        lines = [line.split()[0] for line in transcript.read_text().splitlines()]
        lines = [f"{u} {spoken[ids.index(u)]}{' É 42' if u == ids[0] else ''}" for u in lines]
        transcript.write_text("\n".join(lines) + "\n")
    first = ids[0]
    out = tmp_path / "run"
    args = [
        "test",
        "--config",
        str(speech_run["config"]),
        "--data.data_dir",
        str(corpus),
        "--data.oov_policy",
        policy,
        "--trainer.default_root_dir",
        str(out),
        "--ckpt_path",
        str(speech_run["ckpt"]),
    ]
    if policy == "drop":
        with pytest.warns(UserWarning, match=r"^1 of 2 test transcripts .*\('2', '4', 'é'\); those characters were dropped"):
            assert speech_attend(args) == 0
        assert json.loads(next(out.rglob("test_metrics.json")).read_text())["items"] == 2
    else:
        capsys.readouterr()
        assert speech_attend(args) == 2
        error = one_line_error(capsys.readouterr().err, "speech-attend")
        assert first in error and "'2', '4', 'é'" in error


# ----------------------------------------------------------------------------- recognizer: transcribe


def _short_or_bad_audio(tmp_path: Path, kind: str, tiny_synth: Path) -> Path:
    path = tmp_path / ("speech.flac" if kind == "truncated flac" else "speech.wav")
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated flac":
        shutil.copy(sorted((tiny_synth / "test").rglob("*.flac"))[0], path)
        truncate(path)
    elif kind == "zero samples":
        sf.write(path, np.zeros(0, np.float32), 16000)
    elif kind == "shorter than one listener frame":
        sf.write(path, tone(0.02, 16000), 16000)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["empty", "truncated flac", "zero samples", "shorter than one listener frame"])
def test_transcribe_of_unusable_audio_is_one_line_and_the_other_files_still_run(speech_run, tiny_synth, tmp_path, capsys, kind):
    bad = _short_or_bad_audio(tmp_path, kind, tiny_synth)
    good = sorted((tiny_synth / "test").rglob("*.flac"))[0]
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(bad), str(good)]) == 2
    captured = capsys.readouterr()
    assert str(bad) in one_line_error(captured.err, "speech-attend")
    assert [json.loads(line)["audio"] for line in captured.out.splitlines()] == [str(good)]


@pytest.mark.slow
@pytest.mark.parametrize("rate, channels", [(8000, 1), (44100, 1), (48000, 1), (16000, 2), (48000, 2)])
def test_transcribe_reads_other_rates_and_stereo(speech_run, tmp_path, capsys, rate, channels):
    path = tmp_path / f"tone_{rate}_{channels}.wav"
    sf.write(path, tone(1.5, rate, channels), rate)
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["audio"] == str(path) and result["duration_s"] == pytest.approx(1.5, abs=1e-3)


@pytest.mark.slow
def test_transcribe_of_silence_gives_a_line_and_no_error(speech_run, tmp_path, capsys):
    path = tmp_path / "silence.flac"
    sf.write(path, np.zeros(32000), 16000)
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {k: result[k] for k in ("audio", "text", "duration_s", "chunks")} == {
        "audio": str(path),
        "text": "",
        "duration_s": 2.0,
        "chunks": 1,
    }
    assert [(s["no_speech"], s["words"]) for s in result["segments"]] == [(True, [])]


def test_only_chunks_with_sound_are_decoded(speech_run, tiny_synth, tmp_path):
    from speech_attend.infer.transcribe import Transcriber

    speech, rate = sf.read(sorted((tiny_synth / "test").rglob("*.flac"))[0])
    quiet_room = np.random.default_rng(0).normal(0, 10 ** (-65 / 20), 20 * rate)  # -65 dBFS of noise
    path = tmp_path / "speech_then_silence.flac"
    sf.write(path, np.concatenate([speech, quiet_room]), rate)
    transcriber = Transcriber.load(speech_run["ckpt"], max_chunk_seconds=4)
    decoded, decode = [], transcriber.model.decode
    transcriber.model.decode = lambda waves, lengths, *args, **kwargs: (
        decoded.extend(lengths.tolist()) or decode(waves, lengths, *args, **kwargs)
    )
    result = transcriber.transcribe(path)
    assert result.chunks >= 5 and len(decoded) == 1  # the chunk holding the speech, none of the silent ones
    assert decoded[0] >= len(speech) and result.alignment.size(1) >= result.chunks


def test_leading_silence_is_trimmed_and_the_alignment_keeps_audio_time(speech_run, tiny_synth, tmp_path):
    from speech_attend.infer.transcribe import Transcriber

    speech, rate = sf.read(sorted((tiny_synth / "test").rglob("*.flac"))[0])
    path = tmp_path / "silence_then_speech.flac"
    sf.write(path, np.concatenate([np.zeros(rate), speech]), rate)  # 1 s of silence first
    transcriber = Transcriber.load(speech_run["ckpt"], max_chunk_seconds=60)
    decoded, decode = [], transcriber.model.decode
    transcriber.model.decode = lambda waves, lengths, *args, **kwargs: (
        decoded.extend(lengths.tolist()) or decode(waves, lengths, *args, **kwargs)
    )
    result = transcriber.transcribe(path)
    assert result.chunks == 1 and decoded[0] <= len(speech)  # the silence was not decoded
    frames_per_second = 1 / transcriber.model.frame_seconds
    used = result.alignment.abs().sum(0).nonzero().squeeze(1)
    assert used.numel() and int(used[0]) >= round(0.95 * frames_per_second)  # attention starts where the speech does
    assert result.alignment.size(1) >= round((1 + len(speech) / rate) * frames_per_second) - 1


def test_files_decoded_together_give_what_each_gives_alone_and_errors_keep_their_place(speech_run, tiny_synth, tmp_path):
    from speech_attend.infer.transcribe import Transcriber

    good = sorted(str(p) for p in tiny_synth.rglob("*.flac"))[:5]
    bad = tmp_path / "bad.wav"
    bad.write_text("not audio")
    paths = [good[0], good[1], str(bad), *good[2:]]
    transcriber = Transcriber.load(speech_run["ckpt"])
    alone = {path: transcriber.transcribe(path).text for path in good}
    calls, decode = [], transcriber.model.decode
    transcriber.model.decode = lambda waves, *args, **kwargs: calls.append(waves.size(0)) or decode(waves, *args, **kwargs)
    together = list(transcriber.transcribe_many(paths))
    assert len(calls) == 1 and calls[0] >= 5  # the five files' chunks in one batch
    assert [type(r).__name__ for r in together] == [
        "Transcript",
        "Transcript",
        "AudioError",
        "Transcript",
        "Transcript",
        "Transcript",
    ]
    assert str(bad) in str(together[2])
    assert [r.text for r in together if not isinstance(r, ValueError)] == [alone[path] for path in good]
    assert [r.audio for r in together if not isinstance(r, ValueError)] == good


def test_evaluate_joins_each_voice_into_long_files_and_reports_both_error_rates(speech_run, tiny_synth, capsys):
    argv = ["evaluate", "--model", str(speech_run["ckpt"]), "--devsets", str(tiny_synth), "--groups", "test"]
    assert speech_attend([*argv, "--conditions", "long", "--json", "-"]) == 0
    results = json.loads(capsys.readouterr().out)["groups"]["test"]
    voices = {p.parent.parent.name for p in (tiny_synth / "test").rglob("*.flac")}
    assert list(results) == ["clean", "long"]  # one file each, then the long files
    assert results["clean"]["utterances"] == 2 and results["long"]["files"] == len(voices)
    assert all(0 <= r["wer"] and 0 <= r["cer"] for r in results.values())
    assert speech_attend([*argv, "--conditions", "long"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in table[1:]] == [["test", "clean", "2"], ["test", "long", "2"]]  # the same utterances


@pytest.mark.slow
def test_transcribe_of_a_ten_minute_recording_runs_in_chunks(speech_run, tiny_synth, tmp_path, capsys):
    rate = 16000
    waves = [sf.read(f)[0] for f in sorted((tiny_synth / "test").rglob("*.flac"))]
    pattern = np.concatenate([np.concatenate([w, np.zeros(rate // 2)]) for w in waves])
    path = tmp_path / "ten_minutes.flac"
    sf.write(path, np.resize(pattern, 600 * rate), rate)
    capsys.readouterr()
    assert speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    longest = torch.load(speech_run["ckpt"], map_location="cpu", weights_only=True)["hyper_parameters"]["decoding"][
        "max_chunk_seconds"
    ]
    assert result["duration_s"] == 600.0 and result["chunks"] >= 600 / longest
