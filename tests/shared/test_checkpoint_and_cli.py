"""Safe model loading and the shared command-line frame."""

import json
import os

import pytest
import torch

from shared.io.commands import run_app
from shared.io.model_files import CheckpointError, export_folder, load_model_files, model_tag, safe_torch_load


class _Payload:
    """Unpickling this would create a file: the proof that code ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def test_crafted_pickle_checkpoint_is_refused_and_nothing_in_it_runs(tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"x": _Payload(str(marker))}, **model_tag("show-attend")}, path)
    with pytest.raises(CheckpointError, match="evil.ckpt: refused to load"):
        load_model_files(path, "show-attend")
    assert not marker.exists()


def test_plain_checkpoint_round_trips_with_the_model_weights_only(tmp_path):
    path = tmp_path / "ok.ckpt"
    state_dict = {"model.w": torch.ones(2), "baseline.value": torch.zeros(())}  # a LightningModule's keys
    torch.save(
        {"state_dict": state_dict, "hyper_parameters": {"vocabulary": ["a", "b"], "dim": 4}, **model_tag("show-attend")}, path
    )
    files = load_model_files(path, "show-attend")
    assert list(files.state_dict) == ["w"] and torch.equal(files.state_dict["w"], torch.ones(2))
    assert files.hyper_parameters == {"vocabulary": ["a", "b"], "dim": 4} and files.omitted is None


def test_exported_folder_round_trips_with_no_pickle(tmp_path):
    shared_storage = torch.arange(6.0)
    out = export_folder(tmp_path / "model", "speech-attend", {"a": shared_storage[:3], "b": shared_storage}, {"name": "x"})
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((out / "config.json").read_text()) == {
        "format": "attend/1",
        "app": "speech-attend",
        "hyper_parameters": {"name": "x"},
    }
    files = load_model_files(out, "speech-attend")
    assert torch.equal(files.state_dict["a"], torch.arange(3.0)) and files.hyper_parameters == {"name": "x"}


@pytest.mark.parametrize("app, other", [("show-attend", "speech-attend"), ("speech-attend", "show-attend")])
def test_a_model_of_the_other_app_or_of_no_app_is_named_as_such(tmp_path, app, other):
    export_folder(tmp_path / "model", other, {"w": torch.ones(1)}, {})
    verb = "caption" if app == "show-attend" else "transcribe"
    with pytest.raises(CheckpointError, match=f"model: a {other} .*; {verb} needs a {app} model$"):
        load_model_files(tmp_path / "model", app)
    torch.save({"state_dict": {}, "hyper_parameters": {}}, tmp_path / "untagged.ckpt")
    with pytest.raises(CheckpointError, match="untagged.ckpt: not an attend model"):
        load_model_files(tmp_path / "untagged.ckpt", app)


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all"])
def test_empty_or_corrupt_checkpoint_gives_an_error_naming_the_file(tmp_path, content):
    path = tmp_path / "bad.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="bad.ckpt"):
        safe_torch_load(path)
    with pytest.raises(CheckpointError, match="not found"):
        safe_torch_load(tmp_path / "missing.ckpt")


@pytest.mark.parametrize(
    "content, kind",
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(100), "a PNG image"),
        (b"fLaC" + bytes(100), "a FLAC file"),
        (b"a text file, not a checkpoint\n", "text"),
    ],
)
def test_a_file_of_another_kind_is_named_as_such_not_called_unsafe(tmp_path, content, kind):
    path = tmp_path / "model.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=rf"model.ckpt: not a PyTorch checkpoint: .* starts like {kind}$"):
        safe_torch_load(path)


def test_a_truncated_checkpoint_is_not_readable(tmp_path):
    whole = tmp_path / "whole.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, whole)
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(whole.read_bytes()[:300])
    with pytest.raises(CheckpointError, match="cut.ckpt: not a readable PyTorch checkpoint"):
        safe_torch_load(cut)


def test_incomplete_export_folder_is_reported(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_model_files(tmp_path, "show-attend")


def test_cli_turns_user_errors_into_one_line_and_exit_code_2(capsys):
    def broken(args):
        raise ValueError(f"{args[0]}: expected a PNG image\nsecond line hidden")

    code = run_app("tool", {"caption": broken}, lightning=lambda args: None, argv=["caption", "x.png"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == "tool: error: x.png: expected a PNG image"


def test_cli_debug_flag_shows_the_traceback(capsys):
    def broken(args):
        raise ValueError("boom")

    assert run_app("tool", {"go": broken}, lightning=lambda a: None, argv=["go", "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_cli_rejects_unknown_commands_and_routes_lightning_ones(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("trainer: {}\n")
    seen = []
    assert run_app("tool", {}, lightning=seen.append, argv=["fit", "--config", "c.yaml"]) == 0
    assert seen == [["fit", "--config", "c.yaml"]]
    assert run_app("tool", {}, lightning=seen.append, argv=["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["fit", "--config", "missing.yaml"], ["test", "--config=missing.yaml"]])
def test_a_missing_config_file_is_one_line_before_lightning_runs(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    seen = []
    assert run_app("tool", {}, lightning=seen.append, argv=argv) == 2
    assert seen == []
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("tool: error: missing.yaml: config file not found")
