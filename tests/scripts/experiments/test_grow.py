"""Growing a trained recognizer (scripts/experiments/grow_recognizer.py): the wider model computes what the
narrow one did, and its checkpoint resumes training at the step it was grown at."""

from pathlib import Path

import pytest
import torch
import yaml

from scripts.experiments import grow_recognizer
from speech_attend.cli import main as speech_main
from speech_attend.model.las import build_recognizer

_LAS = {
    "listener_hidden": 8,
    "listener_layers": 1,
    "pyramid_layers": 2,
    "input_stack": 1,
    "layer_norm": True,
    "speller_hidden": 16,
    "speller_layers": 1,
    "embedding_dim": 8,
    "attention": "location",
    "attention_dim": 8,
    "location_filters": 2,
    "location_kernel": 5,
    "dropout": 0.1,
    "ctc_upsample": 2,
    "summary": "mean",
}


def _hparams(**las) -> dict:
    return {"vocabulary": list("abcdefgh "), "las": {**_LAS, **las}, "features": {"n_mels": 20}}


def _outputs(model, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    waves = 0.1 * torch.randn(2, 8000, generator=generator)
    inputs = torch.randint(3, 12, (2, 7), generator=generator)
    with torch.no_grad():
        return model.eval()(waves, torch.tensor([8000, 6000]), inputs)


def _grown(hparams: dict, listener: int, speller: int):
    torch.manual_seed(0)
    narrow = build_recognizer(hparams)
    with torch.no_grad():  # trained-looking norms, so that their copies matter
        for norm in narrow.listener.norms:
            if isinstance(norm, torch.nn.LayerNorm):
                norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-0.5, 0.5)
    wide = build_recognizer({**hparams, "las": {**hparams["las"], "listener_hidden": listener, "speller_hidden": speller}})
    wide.load_state_dict(grow_recognizer.grow_state_dict(narrow.state_dict(), hparams["las"], listener, speller))
    return narrow, wide


@pytest.mark.parametrize("layer_norm, listener, speller", [(True, 16, 16), (True, 8, 24), (False, 12, 20)])
def test_the_grown_model_computes_what_the_narrow_one_did(layer_norm, listener, speller):
    # With layer norm the listener must double (every unit copied once keeps the norm's mean and
    # variance); without it, and for the speller, any width between 1x and 2x keeps the function.
    narrow, wide = _grown(_hparams(layer_norm=layer_norm), listener, speller)
    assert wide.listener.output_dim == 2 * listener and wide.speller.hidden == speller
    before, after = _outputs(narrow), _outputs(wide)
    for name in ("logits", "ctc_log_probs", "alignments"):
        torch.testing.assert_close(after[name], before[name], atol=1e-5, rtol=1e-4)


def test_a_listener_with_layer_norm_grown_by_half_is_close_but_not_equal():
    narrow, wide = _grown(_hparams(), 12, 16)
    before, after = _outputs(narrow), _outputs(wide)
    difference = (after["logits"] - before["logits"]).abs().max()
    assert 0 < difference < before["logits"].abs().max()


def test_noise_moves_only_the_copies_incoming_weights():
    state = build_recognizer(_hparams()).state_dict()
    quiet = grow_recognizer.grow_state_dict(state, _LAS, 16, 16)
    noisy = grow_recognizer.grow_state_dict(state, _LAS, 16, 16, noise=0.01)
    name = "listener.pyramid.0.forward_lstm.weight_hh_l0"  # rows: 4 gates x 16 units, units 8..15 copies
    changed = (noisy[name] != quiet[name]).any(dim=1).view(4, 16)
    assert not changed[:, :8].any() and changed[:, 8:].all()
    assert torch.equal(noisy["listener.norms.0.weight"], quiet["listener.norms.0.weight"])


@pytest.mark.parametrize("listener, speller", [(7, 16), (17, 16), (8, 33)])
def test_a_size_below_the_old_one_or_above_twice_it_is_refused(listener, speller):
    with pytest.raises(ValueError, match="can grow to"):
        grow_recognizer.grow_state_dict(build_recognizer(_hparams()).state_dict(), _LAS, listener, speller)


def test_the_command_names_a_missing_checkpoint_in_one_line(tmp_path, capsys):
    missing = tmp_path / "none.ckpt"
    assert (
        grow_recognizer.main(
            ["--ckpt", str(missing), "--out", str(tmp_path / "g.ckpt"), "--listener-hidden", "16", "--speller-hidden", "16"]
        )
        == 2
    )
    error = capsys.readouterr().err.strip()
    assert error.startswith("grow_recognizer: error:") and str(missing) in error and "\n" not in error
    assert not (tmp_path / "g.ckpt").exists()


@pytest.mark.parametrize("content", [b"not a checkpoint", b""])
def test_the_command_names_a_corrupt_or_empty_checkpoint_in_one_line(tmp_path, capsys, content):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(content)
    assert (
        grow_recognizer.main(
            ["--ckpt", str(bad), "--out", str(tmp_path / "g.ckpt"), "--listener-hidden", "16", "--speller-hidden", "16"]
        )
        == 2
    )
    error = capsys.readouterr().err.strip()
    assert error.startswith("grow_recognizer: error:") and str(bad) in error and "\n" not in error
    assert not (tmp_path / "g.ckpt").exists()


def test_the_command_names_an_unwritable_output_in_one_line(tmp_path, capsys):
    checkpoint = tmp_path / "narrow.ckpt"
    model = build_recognizer(_hparams())
    torch.save(
        {
            "hyper_parameters": _hparams(),
            "global_step": 0,
            "optimizer_states": [],
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        },
        checkpoint,
    )
    out = tmp_path / "no_such_folder" / "g.ckpt"
    assert (
        grow_recognizer.main(["--ckpt", str(checkpoint), "--out", str(out), "--listener-hidden", "16", "--speller-hidden", "16"])
        == 1
    )
    error = capsys.readouterr().err.strip()
    assert error.startswith("grow_recognizer: error: could not write") and str(out) in error and "\n" not in error


@pytest.mark.slow
def test_a_grown_checkpoint_resumes_training_at_its_step_with_the_new_sizes(tiny_synth, tmp_path):
    def config(run: Path, max_steps: int) -> Path:
        path = tmp_path / f"{run.name}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "seed_everything": 0,
                    "trainer": {
                        "accelerator": "cpu",
                        "devices": 1,
                        "max_steps": max_steps,
                        "limit_val_batches": 1,
                        "enable_progress_bar": False,
                        "enable_model_summary": False,
                        "default_root_dir": str(run),
                    },
                    "model": {
                        "las": {
                            "listener_hidden": 8,
                            "pyramid_layers": 2,
                            "speller_hidden": 16,
                            "embedding_dim": 8,
                            "attention_dim": 8,
                            "location_filters": 2,
                            "location_kernel": 5,
                            "layer_norm": True,
                        },
                        "decoding": {"beam_size": 2, "val_beam_size": 1, "max_len_ratio": 1.0},
                        "optimizer": {"warmup_steps": 1},
                    },
                    "data": {"data_dir": str(tiny_synth), "batch_size": 4, "eval_batch_size": 4, "cache_audio": True},
                }
            )
        )
        return path

    narrow = tmp_path / "narrow"
    assert speech_main(["fit", "--config", str(config(narrow, 2))]) == 0
    grown = tmp_path / "grown"
    last = grown / "version_0" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    assert (
        grow_recognizer.main(
            [
                "--ckpt",
                str(narrow / "version_0" / "checkpoints" / "last.ckpt"),
                "--out",
                str(last),
                "--listener-hidden",
                "16",
                "--speller-hidden",
                "24",
            ]
        )
        == 0
    )

    assert (
        speech_main(
            [
                "fit",
                "--config",
                str(config(grown, 4)),
                "--model.las.listener_hidden",
                "16",
                "--model.las.speller_hidden",
                "24",
                "--ckpt_path",
                "last",
            ]
        )
        == 0
    )
    resumed = torch.load(last, map_location="cpu", weights_only=True)
    assert resumed["global_step"] == 4
    assert resumed["hyper_parameters"]["las"]["listener_hidden"] == 16
    assert resumed["state_dict"]["model.listener.pyramid.0.forward_lstm.weight_hh_l0"].shape == (4 * 16, 16)
    assert resumed["state_dict"]["model.speller.output.3.weight"].shape[1] == 24
    adam_steps = {int(state["step"]) for state in resumed["optimizer_states"][0]["state"].values()}
    assert adam_steps == {2}  # the moments started again at the grown step


def test_an_exported_folder_grows_into_an_exported_folder_that_computes_the_same(tmp_path, capsys):
    from shared.io.model_files import export_folder
    from speech_attend.infer.transcribe import load_recognizer

    hparams = _hparams(layer_norm=False)
    torch.manual_seed(0)
    export_folder(tmp_path / "narrow", "speech-attend", build_recognizer(hparams).state_dict(), hparams)
    assert (
        grow_recognizer.main(
            [
                "--ckpt",
                str(tmp_path / "narrow"),
                "--out",
                str(tmp_path / "wide"),
                "--listener-hidden",
                "12",
                "--speller-hidden",
                "24",
                "--noise",
                "0",
            ]
        )
        == 0
    )
    narrow, wide = load_recognizer(tmp_path / "narrow"), load_recognizer(tmp_path / "wide")
    assert wide.speller.hidden == 24 and wide.listener.output_dim == 24
    torch.testing.assert_close(_outputs(wide)["logits"], _outputs(narrow)["logits"], atol=1e-5, rtol=1e-4)
    assert (
        grow_recognizer.main(
            [
                "--ckpt",
                str(tmp_path / "narrow"),
                "--out",
                str(tmp_path / "x"),
                "--listener-hidden",
                "99",
                "--speller-hidden",
                "24",
            ]
        )
        == 2
    )
    assert "can grow to 8..16 units" in capsys.readouterr().err and not (tmp_path / "x").exists()
