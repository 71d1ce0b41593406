"""A full disk: every file that cannot be written is named in one line with the cause.

A checkpoint, an export, the run's metrics, test results and the apps' output files either are
written whole or leave the previous file as it was, and the error says what could not be
written, where, and why ("no space left on device"); the command exits with 2. Metrics are on
disk before each checkpoint, so a run stopped by a full disk keeps every epoch it logged.

Two ways of filling a disk: writers that fail with ``ENOSPC`` after a few bytes (run anywhere),
and a real 4 MiB tmpfs, filled to the last bytes (needs root to mount; tests using it say so
when it cannot be mounted).
"""

from __future__ import annotations

import builtins
import csv
import errno
import os
import subprocess
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml
from matplotlib.figure import Figure
from safetensors import SafetensorError

import shared.training.run_logger as run_logger_module
from shared.evaluation.faithfulness import write_explanations
from shared.evaluation.plots import save_alignment
from shared.io.commands import run_app
from shared.io.model_files import export_folder, load_model_files
from shared.io.writes import WriteError
from shared.training.checkpoints import AtomicCheckpointIO, RunCheckpoints
from shared.training.module import TEST_METRICS_FILE, AttendModule
from shared.training.run_logger import RunLogger
from show_attend.cli import main as caption_main
from show_attend.infer.caption import APP
from show_attend.infer.gallery import write_gallery
from show_attend.train.datamodule import CaptionDataModule
from show_attend.train.module import CaptionerModule
from speech_attend.infer.subtitles import write_outputs
from speech_attend.infer.transcribe import Transcript

NO_SPACE = "no space left on device"
TORCH_ON_A_FULL_DISK = "[enforce fail at inline_container.cc:672] . unexpected pos 627520 vs 627408"


def _no_space() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _FullFile:
    """A file that takes ``room`` more bytes (or characters), then fails as a full disk does."""

    def __init__(self, file, room: int):
        self.file, self.room = file, room

    def write(self, data):
        if len(data) > self.room:
            self.file.write(data[: self.room])
            self.room = 0
            raise _no_space()
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def _open_with_room(room: int):
    """``open`` whose files for writing hold ``room`` bytes before the disk is full."""

    def full_open(file, mode="r", *args, **kwargs):
        opened = builtins.open(file, mode, *args, **kwargs)
        return _FullFile(opened, room) if any(flag in mode for flag in "wax+") else opened

    return full_open


def _torch_save_on_a_full_disk(obj, file, *args, **kwargs) -> None:
    """What ``torch.save`` does when the disk fills: a partial zip, then a RuntimeError raised
    while handling the OSError of its writer."""
    file.write(b"PK\x03\x04" + bytes(4096))
    try:
        raise _no_space()
    except OSError:
        raise RuntimeError(TORCH_ON_A_FULL_DISK)  # noqa: B904  torch's own message, chained as torch chains it


def _temporary_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.tmp"))


def _one_error_line(err: str, prog: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


# ---------------------------------------------------------------- checkpoints


def test_a_checkpoint_that_does_not_fit_names_the_file_and_the_cause_and_keeps_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "checkpoints" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"global_step": 3}, path)
    monkeypatch.setattr(torch, "save", _torch_save_on_a_full_disk)

    with pytest.raises(WriteError) as caught:
        AtomicCheckpointIO().save_checkpoint({"global_step": 6}, path)

    assert str(caught.value) == f"could not write the checkpoint {path}: {NO_SPACE} (the previous last.ckpt is kept)"
    assert caught.value.errno == errno.ENOSPC
    assert torch.load(path, weights_only=True) == {"global_step": 3}
    assert _temporary_files(path.parent) == []


def test_torch_saves_bare_runtime_error_on_a_file_system_with_no_space_left_is_named_as_no_space(tmp_path, monkeypatch):
    def bare_failure(obj, file, *args, **kwargs):
        raise RuntimeError(TORCH_ON_A_FULL_DISK)  # no OSError to read the cause from

    class Full:
        f_bavail, f_frsize = 0, 4096

    monkeypatch.setattr(torch, "save", bare_failure)
    monkeypatch.setattr(os, "statvfs", lambda folder: Full())
    with pytest.raises(WriteError, match=f"could not write the checkpoint {tmp_path / 'a.ckpt'}: {NO_SPACE}$"):
        AtomicCheckpointIO().save_checkpoint({}, tmp_path / "a.ckpt")


def test_a_checkpoint_that_fails_for_another_reason_keeps_torchs_words(tmp_path, monkeypatch):
    def bare_failure(obj, file, *args, **kwargs):
        raise RuntimeError("some other failure\nsecond line")

    monkeypatch.setattr(torch, "save", bare_failure)  # tmp_path's file system has room: not a full disk
    with pytest.raises(WriteError, match=f"could not write the checkpoint {tmp_path / 'a.ckpt'}: some other failure$"):
        AtomicCheckpointIO().save_checkpoint({}, tmp_path / "a.ckpt")
    assert _temporary_files(tmp_path) == []


# ---------------------------------------------------------------- the run's metrics


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


@pytest.mark.parametrize("new_column", [False, True], ids=["append", "wider header"])
def test_metrics_rows_already_written_survive_a_full_disk(tmp_path, monkeypatch, new_column):
    logger = RunLogger(str(tmp_path), version=0)
    logger.log_metrics({"train/loss": 2.0}, step=0)
    logger.save()
    metrics = Path(logger.experiment.metrics_file_path)
    before = metrics.read_bytes()
    monkeypatch.setattr(run_logger_module, "open", _open_with_room(3), raising=False)

    logger.log_metrics({"val/loss" if new_column else "train/loss": 1.5}, step=1)
    with pytest.raises(WriteError) as caught:
        logger.save()

    assert str(caught.value).startswith(f"could not write the run's metrics {metrics}: {NO_SPACE}")
    assert metrics.read_bytes() == before  # no half row, and no header without its rows
    assert _temporary_files(tmp_path / "version_0") == []
    monkeypatch.undo()
    logger.save()  # room again: the row that failed is written then
    assert [row["step"] for row in _rows(metrics)] == ["0", "1"]


def test_the_metrics_logged_so_far_are_on_disk_before_a_checkpoint_is_written(tmp_path):
    logger = RunLogger(str(tmp_path), version=0)
    seen = {}

    class Trainer:
        loggers = [logger]

        def save_checkpoint(self, path, weights_only):
            seen["rows"] = _rows(Path(logger.experiment.metrics_file_path))

    checkpoints = RunCheckpoints()
    checkpoints.dirpath = tmp_path / "checkpoints"
    logger.experiment.log_metrics({"val/loss": 1.0}, step=7)  # a row the logger holds in memory
    checkpoints._save(Trainer(), "last")
    assert [row["step"] for row in seen["rows"]] == ["7"]


# ---------------------------------------------------------------- exports, test results, pictures


def test_an_export_that_does_not_fit_names_the_file_and_keeps_the_previous_export(tmp_path, monkeypatch):
    old = {"w": torch.ones(3)}
    export_folder(tmp_path, APP, old, {"vocabulary": ["a"]})

    def full_save_file(tensors, filename, *args, **kwargs):
        Path(filename).write_bytes(bytes(100))
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr("safetensors.torch.save_file", full_save_file)
    with pytest.raises(WriteError) as caught:
        export_folder(tmp_path, APP, {"w": torch.zeros(3)}, {"vocabulary": ["a"]})

    assert str(caught.value).startswith(f"could not write the exported weights {tmp_path / 'model.safetensors'}: {NO_SPACE}")
    assert torch.equal(load_model_files(tmp_path, APP).state_dict["w"], old["w"])
    assert _temporary_files(tmp_path) == []


def _write_text_on_a_full_disk(monkeypatch) -> None:
    original = Path.write_text

    def full_write_text(self, data, *args, **kwargs):
        original(self, data[:5], *args, **kwargs)
        raise _no_space()

    monkeypatch.setattr(Path, "write_text", full_write_text)


class _Module(AttendModule):
    app = APP

    def output_line(self, record: dict) -> dict:
        return {"key": record["key"]}


def test_test_results_that_do_not_fit_name_the_file(tmp_path, monkeypatch):
    _write_text_on_a_full_disk(monkeypatch)
    with pytest.raises(WriteError, match=f"could not write the test metrics {tmp_path / TEST_METRICS_FILE}: {NO_SPACE}$"):
        _Module()._write_test_results(tmp_path, {"wer": 0.5}, [{"key": "a"}])
    assert list(tmp_path.iterdir()) == []  # no half-written JSON


def test_transcript_files_that_do_not_fit_name_the_file_and_leave_no_half_file(tmp_path, monkeypatch):
    transcript = Transcript("a.wav", "hello", 1.0, 1, torch.zeros(5, 3), list("hello"))
    _write_text_on_a_full_disk(monkeypatch)
    with pytest.raises(WriteError, match=f"could not write the srt transcript {tmp_path / 'a.srt'}: {NO_SPACE}$"):
        write_outputs(transcript, tmp_path, "a", ["srt"])
    assert list(tmp_path.iterdir()) == []


def test_a_gallery_page_that_does_not_fit_names_the_file(tmp_path, monkeypatch):
    _write_text_on_a_full_disk(monkeypatch)
    with pytest.raises(WriteError, match=f"could not write the gallery page {tmp_path / 'index.html'}: {NO_SPACE}$"):
        write_gallery([], tmp_path, "a model")
    assert list(tmp_path.iterdir()) == []


def _savefig_on_a_full_disk(self, fname, *args, **kwargs) -> None:
    Path(fname).write_bytes(b"\x89PNG" + bytes(100))
    raise _no_space()


def test_a_picture_that_does_not_fit_names_the_file_and_leaves_no_half_png(tmp_path, monkeypatch):
    monkeypatch.setattr(Figure, "savefig", _savefig_on_a_full_disk)
    path = tmp_path / "pictures" / "a.png"
    with pytest.raises(WriteError, match=f"could not write the picture {path}: {NO_SPACE}$"):
        save_alignment(torch.rand(3, 5), path, ["a", "b", "c"])
    assert list(path.parent.iterdir()) == []


def test_explanations_that_do_not_fit_name_the_file(tmp_path, monkeypatch):
    class Explanation:
        source, text, outputs = tmp_path / "a.png", "a cat", []

        def to_json(self):
            return [{"word": "a" * 100}]

    monkeypatch.setattr(Path, "open", lambda self, mode="r", **kwargs: _FullFile(builtins.open(self, mode, **kwargs), 10))
    with pytest.raises(WriteError, match=f"could not write the explanations {tmp_path / 'explain.jsonl'}: {NO_SPACE}$"):
        write_explanations([Explanation()], tmp_path, lambda result, path: path, "show-attend", "cells", "words")


def test_caption_overlays_that_do_not_fit_are_one_line_naming_the_file_and_exit_2(tiny_shapes, tmp_path, monkeypatch, capsys):
    datamodule = CaptionDataModule(str(tiny_shapes), image_size=32, min_word_freq=1)
    torch.manual_seed(0)
    module = CaptionerModule(
        datamodule.vocabulary_tokens,
        image_size=32,
        decoding={"beam_size": 2, "max_length": 5},
        encoder={"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
        decoder={"embed_dim": 24, "attention_dim": 24, "hidden_dim": 32, "dropout": 0.0},
    )
    export_folder(tmp_path / "model", APP, module.model.state_dict(), dict(module.hparams))
    image = sorted((tiny_shapes / "images").glob("*.png"))[0]
    monkeypatch.setattr(Figure, "savefig", _savefig_on_a_full_disk)

    code = caption_main(["caption", "--ckpt", str(tmp_path / "model"), "--overlay-dir", str(tmp_path / "out"), str(image)])

    line = _one_error_line(capsys.readouterr().err, "show-attend")
    assert code == 2
    assert (
        line == f"show-attend: error: could not write the picture {tmp_path / 'out' / image.with_suffix('.png').name}: {NO_SPACE}"
    )
    assert list((tmp_path / "out").iterdir()) == []


def test_run_app_prints_an_os_error_without_a_file_name_as_its_cause_only(capsys):
    def failing(args):
        raise _no_space()

    assert run_app("tool", {"go": failing}, lightning=lambda args: None, argv=["go"]) == 2
    assert capsys.readouterr().err.strip() == f"tool: error: {NO_SPACE}"


# ---------------------------------------------------------------- a training stopped by a full disk


def _caption_config(path: Path, data_dir: Path, run_dir: Path, max_steps: int, callbacks: list | None = None) -> Path:
    """Batches of 8 from 24 images: an epoch is 3 steps, validated and checkpointed at its end."""
    config = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": max_steps,
            "val_check_interval": 3,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(run_dir),
            "callbacks": callbacks or [],
        },
        "model": {
            "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 16, "channels_last": False},
            "decoder": {"embed_dim": 24, "attention_dim": 24, "hidden_dim": 32, "dropout": 0.0},
            "optimizer": {"lr": 0.003},
            "decoding": {"beam_size": 2, "max_length": 8},
        },
        "data": {"data_dir": str(data_dir), "image_size": 32, "batch_size": 8, "min_word_freq": 1},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _assert_stopped_by_a_full_disk(code: int, err: str, run: Path) -> None:
    """One line naming last.ckpt and the cause, exit 2, last.ckpt of epoch 0 whole, and the
    metrics of both epochs (logged before the failed checkpoint) in metrics.csv."""
    last = run / "checkpoints" / "last.ckpt"
    assert code == 2, err[-3000:]
    line = _one_error_line(err, "show-attend")
    assert line == f"show-attend: error: could not write the checkpoint {last}: {NO_SPACE} (the previous last.ckpt is kept)"
    assert "Traceback" not in err
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 3
    assert _temporary_files(last.parent) == []
    rows = _rows(run / "metrics.csv")
    assert sorted(int(row["step"]) for row in rows if row.get("train/loss")) == [0, 1, 2, 3, 4, 5]
    assert sorted(int(row["epoch"]) for row in rows if row.get("val/loss")) == [0, 1]


def test_a_training_whose_second_checkpoint_does_not_fit_stops_in_one_line_keeping_the_first_and_the_metrics(
    tiny_shapes, tmp_path, monkeypatch, capsys
):
    saves = []
    real_save = torch.save

    def second_fails(obj, file, *args, **kwargs):
        saves.append(1)
        return (_torch_save_on_a_full_disk if len(saves) >= 2 else real_save)(obj, file, *args, **kwargs)

    monkeypatch.setattr(torch, "save", second_fails)
    config = _caption_config(tmp_path / "c.yaml", tiny_shapes, tmp_path / "runs", max_steps=9)
    code = caption_main(["fit", "--config", str(config)])
    _assert_stopped_by_a_full_disk(code, capsys.readouterr().err, tmp_path / "runs" / "version_0")


# ---------------------------------------------------------------- a real small file system


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs on ``tmp_path/disk``, unmounted after the test (mounting needs root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({mounted.stderr.strip() or mounted.returncode}); "
            "the ENOSPC writers above test the same code"
        )
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def _fill(disk: Path, leave: int = 0) -> None:
    """Fill ``disk`` until ``leave`` bytes (or none, when it is full first) are free."""
    stats = os.statvfs(disk)
    remaining = max(0, stats.f_bavail * stats.f_frsize - leave)
    with (disk / "filler").open("wb", buffering=0) as file:
        while remaining > 0:
            try:
                remaining -= file.write(bytes(min(remaining, 1 << 20)))
            except OSError:  # full a little early: the file system keeps a page for itself
                break


def test_a_real_full_file_system_names_the_checkpoint_and_keeps_the_previous_one(small_disk):
    path = small_disk / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 3}, path)
    _fill(small_disk)
    with pytest.raises(WriteError) as caught:
        AtomicCheckpointIO().save_checkpoint({"w": torch.zeros(100_000)}, path)  # torch.save's own RuntimeError
    assert str(caught.value) == f"could not write the checkpoint {path}: {NO_SPACE} (the previous last.ckpt is kept)"
    assert torch.load(path, weights_only=True) == {"step": 3}
    assert _temporary_files(small_disk) == []


def test_a_real_full_file_system_keeps_the_metrics_rows_when_the_header_widens(small_disk):
    logger = RunLogger(str(small_disk), version=0)
    for step in range(20):
        logger.log_metrics({"train/loss": 1.0 / (step + 1)}, step=step)
    logger.save()
    metrics = Path(logger.experiment.metrics_file_path)
    before = metrics.read_bytes()
    _fill(small_disk)
    logger.log_metrics({"val/loss": 0.5}, step=20)  # a new column: the file is written again
    with pytest.raises(WriteError, match=f"could not write the run's metrics {metrics}: {NO_SPACE}"):
        logger.save()
    assert metrics.read_bytes() == before


class FillDiskAtStep(pl.Callback):
    """Before training step ``step``, fill the run's file system until ``leave`` bytes are free, as
    another program writing to the same disk would."""

    def __init__(self, step: int, leave: int):
        self.step, self.leave = step, leave

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            checkpoint = Path(trainer.log_dir) / "checkpoints" / "last.ckpt"
            assert checkpoint.stat().st_size > 2 * self.leave, "the tiny model's checkpoint would still fit"
            _fill(Path(trainer.default_root_dir), self.leave)


def test_a_training_into_a_nearly_full_file_system_stops_in_one_line_keeping_the_checkpoint_and_the_metrics(
    small_disk, tiny_shapes, tmp_path, capsys
):
    fill = {
        "class_path": "tests.shared.test_disk_full.FillDiskAtStep",
        "init_args": {"step": 3, "leave": 64 * 1024},
    }  # room for metrics
    config = _caption_config(tmp_path / "c.yaml", tiny_shapes, small_disk, max_steps=9, callbacks=[fill])
    code = caption_main(["fit", "--config", str(config)])
    _assert_stopped_by_a_full_disk(code, capsys.readouterr().err, small_disk / "version_0")


def test_exported_files_get_a_plain_file_s_permissions_not_the_writers_own(tmp_path):
    out = export_folder(tmp_path / "model", APP, {"w": torch.zeros(2, 3)}, {"size": 3})
    umask = os.umask(0)
    os.umask(umask)
    for name in ("model.safetensors", "config.json"):  # safetensors writes its file 0600 of its own
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~umask, name
