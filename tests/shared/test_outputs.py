"""The output rule both apps' commands follow (shared/io/outputs.py): output folders are made and
checked before any work, and each input's files get a name of their own."""

import os
import sys

import numpy as np
import pytest
from PIL import Image

from shared.io.model_files import export_folder
from shared.io.outputs import output_names, writable_folder
from show_attend.model.captioner import build_captioner

_CAPTIONER = {
    "vocabulary": ["a", "red", "blue", "square"],
    "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 8, "channels_last": False},
    "decoder": {"embed_dim": 8, "attention_dim": 8, "hidden_dim": 8, "dropout": 0.0},
    "image_size": 32,
}


def test_each_input_is_named_by_its_stem():
    assert output_names(["a/talk.wav", "b/walk.flac", "c.png"]) == ["talk", "walk", "c"]


def test_inputs_with_one_stem_in_different_folders_are_told_apart_by_as_many_folders_as_it_takes():
    assert output_names(["a/talk.wav", "b/talk.wav"]) == ["a_talk", "b_talk"]
    deeper = ["/x/a/talk.wav", "/y/a/talk.wav", "/z/b/talk.wav"]  # one depth for the whole group
    assert output_names(deeper) == ["x_a_talk", "y_a_talk", "z_b_talk"]


def test_what_still_collides_is_numbered_in_input_order_past_the_names_given():
    assert output_names(["x/t.wav", "x/t.flac", "t-2.wav"]) == ["t", "t-3", "t-2"]
    assert output_names(["t.wav", "t.wav", "t.wav"]) == ["t", "t-2", "t-3"]  # one file given three times


def test_an_output_folder_is_made_with_its_parents(tmp_path):
    folder = tmp_path / "new" / "deeper"
    assert writable_folder(folder, "--out") == folder and folder.is_dir()
    assert list(folder.iterdir()) == []  # the check leaves nothing behind


def test_a_folder_that_cannot_be_written_is_one_line_naming_the_option(tmp_path):
    (tmp_path / "taken").write_text("a file, not a folder")
    for folder in (tmp_path / "taken", tmp_path / "taken" / "below"):
        with pytest.raises(ValueError, match=f"^--output-dir {folder}: not a folder that can be written") as caught:
            writable_folder(folder, "--output-dir")
        assert "\n" not in str(caught.value)


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(ValueError, match="--overlay-dir .*: not a folder that can be written \\(permission denied\\)"):
            writable_folder(folder, "--overlay-dir")
    finally:
        folder.chmod(0o700)


def test_caption_overlays_of_two_images_of_one_name_do_not_overwrite_each_other(tmp_path, capsys):
    """The captioner names its overlays as the recognizer names its transcript files (tests/speech_attend/test_transcript_outputs.py)."""
    from show_attend.cli import main

    model = build_captioner(_CAPTIONER)
    exported = export_folder(tmp_path / "model", "show-attend", model.state_dict(), _CAPTIONER)

    paths = []
    for folder, colour in (("a", (255, 0, 0)), ("b", (0, 0, 255))):
        (tmp_path / folder).mkdir()
        paths.append(tmp_path / folder / "scene.png")
        Image.fromarray(np.full((32, 32, 3), colour, dtype=np.uint8)).save(paths[-1])
    out = tmp_path / "overlays"
    assert main(["caption", "--ckpt", str(exported), "--overlay-dir", str(out), *map(str, paths)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["a_scene.png", "b_scene.png"]
