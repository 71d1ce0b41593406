"""``speech-attend`` end to end on a tiny corpus: fit, test, transcribe, export, bad input."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from safetensors.torch import load_file

from shared.training.averaging import TRAINED_STATE
from speech_attend.cli import main
from tests.helpers import tiny_speech_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tiny_synth, tmp_path_factory):
    """A corpus, a config and the checkpoint of a 3-step fit."""
    root, corpus = tmp_path_factory.mktemp("recognizer"), tiny_synth
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_speech_config()))
    run_dir = root / "run"
    code = main(["fit", "--config", str(config), "--data.data_dir", str(corpus), "--trainer.default_root_dir", str(run_dir)])
    assert code == 0
    checkpoints = sorted(run_dir.rglob("last.ckpt"))
    assert checkpoints, "fit must leave a checkpoint under default_root_dir"
    return {"root": root, "corpus": corpus, "config": config, "ckpt": checkpoints[0], "run_dir": run_dir}


def test_fit_checkpoint_loads_with_weights_only(trained):
    checkpoint = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    assert hparams["vocabulary"] and hparams["features"]["n_mels"] == 80
    assert checkpoint["global_step"] == 3
    assert int(checkpoint["state_dict"]["model.frontend.norm.frames"]) > 0  # statistics saved


def test_test_writes_metrics_json(trained):
    out = trained["root"] / "test_run"
    code = main(
        [
            "test",
            "--config",
            str(trained["config"]),
            "--data.data_dir",
            str(trained["corpus"]),
            "--trainer.default_root_dir",
            str(out),
            "--ckpt_path",
            str(trained["ckpt"]),
        ]
    )
    assert code == 0
    metrics = json.loads(next(out.rglob("test_metrics.json")).read_text())
    assert {"wer", "cer", "items"} <= set(metrics) and metrics["items"] == 2


def test_model_options_on_the_command_line_replace_the_checkpoint_s_settings(trained, caplog):
    saved = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)["hyper_parameters"]
    out = trained["root"] / "fine_tune"
    code = main(
        [
            "fit",
            "--config",
            str(trained["config"]),
            "--data.data_dir",
            str(trained["corpus"]),
            "--trainer.default_root_dir",
            str(out),
            "--trainer.max_steps",
            "4",
            "--ckpt_path",
            str(trained["ckpt"]),
            "--model.features.freq_masks",
            "1",
            f"--model.features.time_masks={saved['features']['time_masks'] + 1}",
        ]
    )
    assert code == 0
    tuned = torch.load(next(out.rglob("last.ckpt")), map_location="cpu", weights_only=True)["hyper_parameters"]
    assert saved["features"]["freq_masks"] != 1
    assert tuned["features"]["freq_masks"] == 1 and tuned["features"]["time_masks"] == saved["features"]["time_masks"] + 1
    assert {k: v for k, v in tuned["features"].items() if not k.endswith("masks")} == {
        k: v for k, v in saved["features"].items() if not k.endswith("masks")
    }  # the rest is the checkpoint's
    assert tuned["las"] == saved["las"] and tuned["vocabulary"] == saved["vocabulary"]
    assert "--model.features.freq_masks 1: replaces the checkpoint's" in caplog.text


def test_a_resumed_fit_takes_the_feature_statistics_from_its_checkpoint_without_reading_audio(trained, monkeypatch):
    from speech_attend.train.datamodule import SpeechDataModule

    def refuse(*args, **kwargs):
        raise AssertionError("a resumed run read training audio for feature statistics")
        yield  # a generator, as the method is: only reading a batch fails

    monkeypatch.setattr(SpeechDataModule, "statistics_batches", refuse)
    out = trained["root"] / "resumed"
    code = main(
        [
            "fit",
            "--config",
            str(trained["config"]),
            "--data.data_dir",
            str(trained["corpus"]),
            "--trainer.default_root_dir",
            str(out),
            "--trainer.max_steps",
            "4",
            "--ckpt_path",
            str(trained["ckpt"]),
        ]
    )
    assert code == 0
    saved, resumed = (
        torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
        for path in (trained["ckpt"], next(out.rglob("last.ckpt")))
    )
    for key in ("model.frontend.norm.mean", "model.frontend.norm.frames"):
        assert torch.equal(saved[key], resumed[key])


def _model_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    return {key[len("model.") :]: value for key, value in state.items() if key.startswith("model.")}


def test_init_from_an_export_starts_a_new_run_from_its_weights(trained, caplog):
    exported = trained["root"] / "exported"
    assert main(["export", "--ckpt", str(trained["ckpt"]), "--out", str(exported)]) == 0
    out = trained["root"] / "from_export"
    # a learning rate of 1e-12: the one step leaves the weights where the run started them
    code = main(
        [
            "fit",
            "--config",
            str(trained["config"]),
            "--data.data_dir",
            str(trained["corpus"]),
            "--trainer.default_root_dir",
            str(out),
            "--trainer.max_steps",
            "1",
            "--init_from",
            str(exported),
            "--model.optimizer.lr",
            "1e-12",
            "--model.decoding.beam_size",
            "5",
        ]
    )
    assert code == 0
    checkpoint = next(out.rglob("last.ckpt"))
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert saved["global_step"] == 1  # a new run: step 0 and a new optimiser, not the trained run's step 3
    started, trained_weights = _model_weights(checkpoint), _model_weights(trained["ckpt"])
    assert started.keys() == trained_weights.keys()
    assert all(torch.allclose(started[key].float(), trained_weights[key].float(), atol=1e-8) for key in started)  # and statistics
    before = torch.load(trained["ckpt"], map_location="cpu", weights_only=True)["hyper_parameters"]
    assert saved["hyper_parameters"]["las"] == before["las"] and saved["hyper_parameters"]["vocabulary"] == before["vocabulary"]
    assert saved["hyper_parameters"]["decoding"]["beam_size"] == 5 != before["decoding"]["beam_size"]
    assert "--model.decoding.beam_size 5: replaces the --init_from model's" in caplog.text


def test_init_from_a_fresh_config_trains_from_random_weights_otherwise(trained):
    """The check above would pass by chance if a new run's random weights equalled the trained
    ones; they do not."""
    out = trained["root"] / "from_scratch"
    assert (
        main(
            [
                "fit",
                "--config",
                str(trained["config"]),
                "--data.data_dir",
                str(trained["corpus"]),
                "--trainer.default_root_dir",
                str(out),
                "--trainer.max_steps",
                "1",
                "--model.optimizer.lr",
                "1e-12",
                "--seed_everything",
                "1",
            ]
        )
        == 0
    )
    fresh, trained_weights = _model_weights(next(out.rglob("last.ckpt"))), _model_weights(trained["ckpt"])
    assert not torch.allclose(fresh["speller.embedding.weight"], trained_weights["speller.embedding.weight"], atol=1e-3)


@pytest.mark.parametrize("problem", ["missing", "both", "captioner"])
def test_init_from_refuses_a_bad_model_in_one_line(trained, tmp_path, capsys, problem):
    model = {"missing": tmp_path / "no_such_model", "both": trained["ckpt"], "captioner": tmp_path / "captioner"}[problem]
    if problem == "captioner":
        model.mkdir()
        (model / "model.safetensors").write_bytes(b"")
        (model / "config.json").write_text(json.dumps({"format": "attend/1", "app": "show-attend", "hyper_parameters": {}}))
    extra = ["--ckpt_path", str(trained["ckpt"])] if problem == "both" else []
    code = main(
        [
            "fit",
            "--config",
            str(trained["config"]),
            "--data.data_dir",
            str(trained["corpus"]),
            "--trainer.default_root_dir",
            str(tmp_path / "run"),
            "--trainer.max_steps",
            "1",
            "--init_from",
            str(model),
            *extra,
        ]
    )
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("speech-attend: error: ")
    assert {"missing": "no_such_model", "both": "give one of them", "captioner": "show-attend (captioner) model"}[
        problem
    ] in error[0]


def _test_files(corpus: Path) -> list[str]:
    return sorted(str(p) for p in (corpus / "test").rglob("*.flac"))


def test_transcribe_prints_a_line_per_file_with_its_name(trained, capsys):
    files = _test_files(trained["corpus"])
    assert main(["transcribe", "--ckpt", str(trained["ckpt"]), *files]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(files) >= 2
    assert [line.split(": ", 1)[0] for line in lines] == files  # "file: text", as caption prints "file: caption"


def test_transcribe_json_and_alignment_pngs(trained, capsys, tmp_path):
    files = _test_files(trained["corpus"])
    # A stereo 44.1 kHz WAV of a test file is read too (downmixed and resampled).
    wave, rate = sf.read(files[0])
    stereo = tmp_path / "stereo.wav"
    resampled = np.interp(np.arange(int(len(wave) * 44100 / rate)) * rate / 44100, np.arange(len(wave)), wave)
    sf.write(stereo, np.stack([resampled, 0.5 * resampled], 1), 44100)
    code = main(
        [
            "transcribe",
            "--ckpt",
            str(trained["ckpt"]),
            "--json",
            "--alignment-dir",
            str(tmp_path / "png"),
            "--beam-size",
            "3",
            *files,
            str(stereo),
        ]
    )
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["audio"] for line in lines] == [*files, str(stereo)]
    assert all({"audio", "text", "duration_s", "chunks"} <= set(line) and line["chunks"] >= 1 for line in lines)  # and new keys
    assert abs(lines[-1]["duration_s"] - lines[0]["duration_s"]) < 0.01
    pngs = sorted((tmp_path / "png").glob("*.png"))
    assert len(pngs) == 3 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_long_audio_is_transcribed_in_chunks(trained, capsys, tmp_path):
    files = _test_files(trained["corpus"])
    waves = [sf.read(f)[0] for f in files]
    long = tmp_path / "long.flac"
    sf.write(long, np.concatenate([np.concatenate([w, np.zeros(4000)]) for w in waves * 3]), 16000)
    code = main(["transcribe", "--ckpt", str(trained["ckpt"]), "--json", "--max-chunk-seconds", "4", str(long)])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["chunks"] >= 2 and result["duration_s"] > 4


def test_export_then_transcribe_gives_the_same_text(trained, capsys):
    exported = trained["root"] / "exported"
    assert main(["export", "--ckpt", str(trained["ckpt"]), "--out", str(exported)]) == 0
    assert {p.name for p in exported.iterdir()} == {"model.safetensors", "config.json"}
    config = json.loads((exported / "config.json").read_text())
    assert config["format"] == "attend/1" and config["app"] == "speech-attend" and config["hyper_parameters"]["vocabulary"]
    weights = load_file(str(exported / "model.safetensors"))
    assert weights["frontend.norm.mean"].shape == (80,) and int(weights["frontend.norm.frames"]) > 0  # the statistics travel
    capsys.readouterr()
    files = _test_files(trained["corpus"])
    main(["transcribe", "--ckpt", str(trained["ckpt"]), *files])
    from_checkpoint = capsys.readouterr().out
    main(["transcribe", "--ckpt", str(exported), *files])
    assert capsys.readouterr().out == from_checkpoint


@pytest.mark.parametrize("kind", ["missing", "text"])
def test_bad_audio_file_gives_one_line_error_and_exit_code_2(trained, capsys, tmp_path, kind):
    path = tmp_path / "speech.wav"
    if kind == "text":
        path.write_text("this is not audio\n")
    code = main(["transcribe", "--ckpt", str(trained["ckpt"]), str(path)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("speech-attend: error:") and str(path) in err


def test_missing_checkpoint_gives_one_line_error(capsys, tmp_path):
    code = main(["transcribe", "--ckpt", str(tmp_path / "nope.ckpt"), str(tmp_path / "a.wav")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "nope.ckpt" in err


def test_transcribe_as_a_subprocess(trained):
    files = _test_files(trained["corpus"])
    script = Path(sys.executable).parent / "speech-attend"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "speech_attend.cli"]
    result = subprocess.run(
        [*command, "transcribe", "--ckpt", str(trained["ckpt"]), "--json", files[0]], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["audio"] == files[0]


def test_fit_help_shows_the_keep_punctuation_default_in_quotes(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    entry = help_text[help_text.index("  --data.keep_punctuation") :].split("\n  --")[0]  # its lines, up to the next option
    entry = " ".join(entry.split())
    assert entry.endswith("""(type: str, default: "'")"""), entry
    assert "apostrophes by default" in entry


def test_the_recognizer_s_fit_with_averaging_exports_the_average(trained, tmp_path):
    run = tmp_path / "run"
    assert (
        main(
            [
                "fit",
                "--config",
                str(trained["config"]),
                "--data.data_dir",
                str(trained["corpus"]),
                "--trainer.default_root_dir",
                str(run),
                "--averaging.decay",
                "0.5",
            ]
        )
        == 0
    )
    checkpoint = torch.load(next(run.rglob("last.ckpt")), map_location="cpu", weights_only=True)
    averaged = [k for k, v in checkpoint["state_dict"].items() if not torch.equal(v, checkpoint[TRAINED_STATE][k])]
    assert averaged and not any(
        k.endswith(("norm.mean", "norm.std", "norm.frames")) for k in averaged
    )  # the statistics are not averaged
    assert main(["export", "--ckpt", str(next(run.rglob("last.ckpt"))), "--out", str(tmp_path / "model")]) == 0
    exported = load_file(tmp_path / "model" / "model.safetensors")
    for name in averaged:
        torch.testing.assert_close(exported[name.removeprefix("model.")], checkpoint["state_dict"][name])


def test_a_fit_with_the_consistency_loss_gets_references_from_the_linked_data_module(trained, tmp_path, monkeypatch):
    from speech_attend.train.module import RecognizerModule

    terms = []
    original = RecognizerModule._consistency_loss

    def recorded(self, batch, states, encoder_lengths):
        term = original(self, batch, states, encoder_lengths)
        terms.append(None if term is None else float(term.detach()))
        return term

    monkeypatch.setattr(RecognizerModule, "_consistency_loss", recorded)
    assert (
        main(
            [
                "fit",
                "--config",
                str(trained["config"]),
                "--data.data_dir",
                str(trained["corpus"]),
                "--trainer.default_root_dir",
                str(tmp_path / "run"),
                "--trainer.max_steps",
                "2",
                "--model.consistency_weight",
                "0.5",
                "--data.augment.noise_prob",
                "1",
                "--data.augment.babble_prob",
                "0",
                "--data.augment.snr_db",
                "[0,5]",
            ]
        )
        == 0
    )
    assert len(terms) == 2 and all(term is not None and term > 0 for term in terms)
    saved = torch.load(next((tmp_path / "run").rglob("last.ckpt")), map_location="cpu", weights_only=True)
    assert saved["hyper_parameters"]["consistency_weight"] == 0.5
