"""Bad input, command by command, for both apps: the errors they share.

Anything a user can get wrong ends the command with one line ``PROG: error: ...`` that names the
file or value, and exit code 2: a missing, empty or foreign checkpoint, the other app's model, an
out-of-range option, a folder without inputs, bad ``prepare`` counts.

Each app's own bad input: ``tests/show_attend/test_bad_input.py``, ``tests/speech_attend/test_bad_input.py``;
the tiny runs they share are ``caption_run`` and ``speech_run`` (conftest.py).
"""

from __future__ import annotations

import json
import shutil

import pytest

from show_attend.cli import main as show_attend
from speech_attend.cli import main as speech_attend
from tests.helpers import one_line_error


@pytest.mark.parametrize(
    "prog, command",
    [
        ("show-attend", "export"),
        ("show-attend", "caption"),
        ("speech-attend", "export"),
        ("speech-attend", "transcribe"),
    ],
)
@pytest.mark.parametrize("kind", ["missing", "empty", "text"])
def test_a_missing_empty_or_foreign_checkpoint_is_a_one_line_error(tmp_path, capsys, prog, command, kind):
    checkpoint = tmp_path / "model.ckpt"
    if kind != "missing":
        checkpoint.write_bytes(b"" if kind == "empty" else b"a text file, not a checkpoint\n")
    rest = ["--out", str(tmp_path / "out")] if command == "export" else [str(tmp_path / "input.png")]
    app = show_attend if prog == "show-attend" else speech_attend
    assert app([command, "--ckpt", str(checkpoint), *rest]) == 2
    assert str(checkpoint) in one_line_error(capsys.readouterr().err, prog)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "prog, option, value",
    [
        ("show-attend", "--beam-size", "0"),
        ("show-attend", "--max-length", "0"),
        ("speech-attend", "--beam-size", "0"),
        ("speech-attend", "--max-chunk-seconds", "0"),
        ("speech-attend", "--max-chunk-seconds", "-3"),
    ],
)
def test_an_out_of_range_option_is_a_one_line_error_naming_it(caption_run, speech_run, tmp_path, capsys, prog, option, value):
    if prog == "show-attend":
        code = show_attend(
            ["caption", "--ckpt", str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"), option, value, "x.png"]
        )
    else:
        code = speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), option, value, "x.wav"])
    assert code == 2
    assert f"{option} must be" in one_line_error(capsys.readouterr().err, prog)


def test_caption_and_transcribe_take_folders_and_name_a_folder_without_inputs(
    caption_run, speech_run, tiny_shapes, tiny_synth, tmp_path, capsys
):
    images = sorted((tiny_shapes / "images").glob("*.png"))[:3]
    folder = tmp_path / "photos"
    (folder / "b").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    shutil.copy(images[0], folder / "b" / "z.png")
    shutil.copy(images[1], folder / "a.PNG")
    (folder / "notes.txt").write_text("not an image")
    capsys.readouterr()
    code = show_attend(
        [
            "caption",
            "--ckpt",
            str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"),
            "--json",
            str(folder),
            str(tmp_path / "empty"),
            str(images[2]),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2  # the folder without images
    assert [json.loads(line)["image"] for line in out.splitlines()] == [
        str(folder / "a.PNG"),
        str(folder / "b" / "z.png"),
        str(images[2]),
    ]
    assert f"{tmp_path / 'empty'}: a folder with no image files" in one_line_error(err, "show-attend")

    audio = tmp_path / "recordings"
    audio.mkdir()
    for path in sorted((tiny_synth / "test").rglob("*.flac"))[:2]:
        shutil.copy(path, audio / path.name)
    code = speech_attend(["transcribe", "--ckpt", str(speech_run["ckpt"]), "--json", str(audio), str(tmp_path / "empty")])
    out, err = capsys.readouterr()
    assert code == 2
    assert [json.loads(line)["audio"] for line in out.splitlines()] == sorted(str(p) for p in audio.glob("*.flac"))
    assert f"{tmp_path / 'empty'}: a folder with no audio files" in one_line_error(err, "speech-attend")


def test_an_os_error_reads_path_then_reason(caption_run, tmp_path, capsys):
    taken = tmp_path / "out"
    taken.write_text("a file where the export folder should go")
    assert (
        show_attend(
            ["export", "--ckpt", str(caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"), "--out", str(taken)]
        )
        == 2
    )
    assert one_line_error(capsys.readouterr().err, "show-attend") == f"show-attend: error: {taken}: file exists"


def test_the_other_apps_checkpoint_is_named_as_such(caption_run, speech_run, tmp_path, capsys):
    captioner = caption_run["run"] / "version_0" / "checkpoints" / "last.ckpt"
    assert speech_attend(["transcribe", "--ckpt", str(captioner), str(tmp_path / "input.wav")]) == 2
    assert "a show-attend (captioner) model; transcribe needs a speech-attend model" in one_line_error(
        capsys.readouterr().err, "speech-attend"
    )
    assert show_attend(["caption", "--ckpt", str(speech_run["ckpt"]), str(tmp_path / "input.png")]) == 2
    assert "a speech-attend (recognizer) model; caption needs a show-attend model" in one_line_error(
        capsys.readouterr().err, "show-attend"
    )


@pytest.mark.parametrize(
    "prog, args, expected",
    [
        ("show-attend", ["shapes", "--train", "-1"], "non-negative"),
        ("show-attend", ["shapes", "--train", "0", "--val", "0", "--test", "0"], "nothing to generate"),
        ("speech-attend", ["synth", "--train", "-1"], "utterance counts must be >= 0"),
    ],
)
def test_prepare_with_bad_counts_is_a_one_line_error(tmp_path, capsys, prog, args, expected):
    app = show_attend if prog == "show-attend" else speech_attend
    assert app(["prepare", *args, "--out", str(tmp_path / "out")]) == 2
    assert expected in one_line_error(capsys.readouterr().err, prog)


@pytest.mark.parametrize(
    "prog, args",
    [
        ("show-attend", ["shapes", "--quiet"]),
        ("speech-attend", ["synth", "--train", "1", "--dev", "0", "--test", "0"]),
    ],
)
def test_prepare_into_a_path_that_is_a_file_is_a_one_line_error(tmp_path, capsys, prog, args):
    out = tmp_path / "file.txt"
    out.write_text("already here\n")
    app = show_attend if prog == "show-attend" else speech_attend
    assert app(["prepare", *args, "--out", str(out)]) == 2
    assert str(out) in one_line_error(capsys.readouterr().err, prog)
