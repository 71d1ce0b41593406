"""The two plain layouts people make for their own data, read alike by both apps: a Hugging Face
folder (imagefolder, audiofolder) and a JSONL/CSV manifest.

Every fixture is written in tmp_path in the real on-disk format: tiny PNGs, sine-tone WAVs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from shared.io.data_files import metadata_files, read_rows
from show_attend.data.readers import DataError, read_captions, read_imagefolder
from show_attend.data.readers import read_manifest as read_caption_manifest
from show_attend.train.datamodule import CaptionDataModule
from speech_attend.data.readers import CorpusError, read_audiofolder, read_corpus
from speech_attend.train.datamodule import SpeechDataModule


def _image(path: Path, colour: str = "red") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), colour).save(path)
    return path


def _audio(path: Path, seconds: float = 0.25, rate: int = 16000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate)
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _where(path: Path, line: int) -> str:
    return re.escape(f"{path}:{line}:")


# ----------------------------------------------------------------------------- imagefolder


def test_imagefolder_metadata_jsonl_gives_one_record_per_image_with_all_its_captions(tmp_path):
    _image(tmp_path / "a.png")
    _image(tmp_path / "pets" / "b.png", "blue")
    _jsonl(
        tmp_path / "metadata.jsonl",
        [
            {"file_name": "a.png", "text": "A red square."},
            {"file_name": "pets/b.png", "text": "a blue square", "source": "ignored"},
            {"file_name": "a.png", "text": "Something red, it's square."},
        ],
    )
    first, second = read_imagefolder(tmp_path)
    assert first.path == (tmp_path / "a.png").resolve() and second.path == (tmp_path / "pets" / "b.png").resolve()
    assert first.references == [["a", "red", "square"], ["something", "red", "it's", "square"]]
    assert second.references == [["a", "blue", "square"]]
    assert first.split == second.split == "train"  # one metadata file in the folder itself: training only


def test_imagefolder_split_folders_with_metadata_csv_give_train_val_and_test(tmp_path):
    for split, colour in (("train", "red"), ("validation", "green"), ("test", "blue")):
        _image(tmp_path / split / "x.png", colour)
        (tmp_path / split / "metadata.csv").write_text(f'file_name,text\nx.png,"a {colour} square, small"\nx.png,{colour}\n')
    records = read_imagefolder(tmp_path)
    assert [(r.split, r.path.parent.name, r.references) for r in records] == [
        ("train", "train", [["a", "red", "square", "small"], ["red"]]),
        ("val", "validation", [["a", "green", "square", "small"], ["green"]]),
        ("test", "test", [["a", "blue", "square", "small"], ["blue"]]),
    ]


def test_imagefolder_row_without_text_names_file_and_line(tmp_path):
    _image(tmp_path / "train" / "a.png")
    metadata = _jsonl(tmp_path / "train" / "metadata.jsonl", [{"file_name": "a.png", "text": "ok"}, {"file_name": "a.png"}])
    with pytest.raises(DataError, match=_where(metadata, 2) + " expected a non-empty 'text'"):
        read_imagefolder(tmp_path)


@pytest.mark.parametrize("case", ["missing file", "empty text", "no words", "missing column"])
def test_imagefolder_bad_csv_row_names_file_and_line(tmp_path, case):
    _image(tmp_path / "a.png")
    row, expected = {
        "missing file": ("b.png,a cat", "image file 'b.png' not found"),
        "empty text": ('a.png,"  "', "expected a non-empty 'text'"),
        "no words": ("a.png,!!", "has no words"),
        "missing column": (",a cat", "expected a non-empty 'file_name' path"),
    }[case]
    metadata = tmp_path / "metadata.csv"
    metadata.write_text(f"file_name,text\na.png,a red square\n{row}\n")
    with pytest.raises(DataError, match=_where(metadata, 3) + ".*" + re.escape(expected)):
        read_imagefolder(tmp_path)


def test_imagefolder_metadata_without_a_text_column_names_the_header(tmp_path):
    metadata = tmp_path / "metadata.csv"
    metadata.write_text("file_name,caption\na.png,a cat\n")
    with pytest.raises(DataError, match=_where(metadata, 1) + r" header lacks column\(s\) \['text'\]"):
        read_imagefolder(tmp_path)


# ----------------------------------------------------------------------------- caption manifest


def test_caption_manifest_jsonl_gives_one_record_per_image_with_all_its_captions_and_its_split(tmp_path):
    for name in ("images/a.png", "images/b.png", "elsewhere.png"):
        _image(tmp_path / name)
    manifest = _jsonl(
        tmp_path / "captions.jsonl",
        [
            {"image": "images/a.png", "text": "A red square.", "split": "train"},
            {"image": "images/b.png", "text": "a blue one", "split": "validation"},
            {"image": "./images/a.png", "text": "red", "split": "train"},
            {"image": str((tmp_path / "elsewhere.png").resolve()), "text": "far away", "split": "restval"},
        ],
    )
    a, b, far = read_caption_manifest(manifest)
    assert (a.split, a.references) == ("train", [["a", "red", "square"], ["red"]])
    assert (b.split, b.references, far.split) == ("val", [["a", "blue", "one"]], "train")


def test_caption_manifest_csv_row_with_an_unknown_split_names_file_and_line(tmp_path):
    _image(tmp_path / "a.png")
    manifest = tmp_path / "captions.csv"
    manifest.write_text("split,image,text\ntrain,a.png,a red square\ndevel,a.png,red\n")
    with pytest.raises(DataError, match=_where(manifest, 3) + " 'split' is 'devel'; expected train, val"):
        read_caption_manifest(manifest)


@pytest.mark.parametrize("case", ["missing image", "empty text", "missing split", "not json"])
def test_caption_manifest_bad_jsonl_row_names_file_and_line(tmp_path, case):
    _image(tmp_path / "a.png")
    good = json.dumps({"image": "a.png", "text": "a red square", "split": "train"})
    bad, expected = {
        "missing image": (json.dumps({"image": "gone.png", "text": "x", "split": "train"}), "image file 'gone.png' not found"),
        "empty text": (json.dumps({"image": "a.png", "text": "", "split": "train"}), "expected a non-empty 'text'"),
        "missing split": (json.dumps({"image": "a.png", "text": "x"}), "'split' is None"),
        "not json": ("{oops", "not valid JSON"),
    }[case]
    manifest = tmp_path / "captions.jsonl"
    manifest.write_text(f"{good}\n{bad}\n")
    with pytest.raises(DataError, match=_where(manifest, 2) + ".*" + re.escape(expected)):
        read_caption_manifest(manifest)


def test_caption_manifest_image_in_two_splits_names_both_lines(tmp_path):
    _image(tmp_path / "a.png")
    manifest = _jsonl(
        tmp_path / "captions.jsonl",
        [
            {"image": "a.png", "text": "a red square", "split": "train"},
            {"image": "a.png", "text": "red", "split": "test"},
        ],
    )
    with pytest.raises(DataError, match=_where(manifest, 2) + ".*test split here, in train at " + re.escape(f"{manifest}:1")):
        read_caption_manifest(manifest)


# ----------------------------------------------------------------------------- the captioner's data module


def test_caption_data_module_recognises_a_manifest_and_an_imagefolder(tmp_path):
    manifest_dir, folder = tmp_path / "manifest", tmp_path / "folder"
    rows = []
    for split, names in (("train", "abc"), ("val", "d"), ("test", "e")):
        for name in names:
            _image(manifest_dir / "images" / f"{name}.png")
            _image(folder / ("validation" if split == "val" else split) / f"{name}.png")
            rows.append({"image": f"images/{name}.png", "text": f"a red square {name}", "split": split})
    _jsonl(manifest_dir / "captions.jsonl", rows)
    for split in ("train", "validation", "test"):
        _jsonl(
            folder / split / "metadata.jsonl",
            [
                {"file_name": Path(r["image"]).name, "text": r["text"]}
                for r in rows
                if r["split"] == {"validation": "val"}.get(split, split)
            ],
        )
    for data_dir, source in ((manifest_dir, manifest_dir / "captions.jsonl"), (folder, folder)):
        datamodule = CaptionDataModule(str(data_dir), image_size=16, batch_size=2, min_word_freq=1)
        assert datamodule.source == source
        assert [len(datamodule.split(s)) for s in ("train", "val", "test")] == [3, 1, 1]
        assert {"a", "red", "square", "b"} <= set(datamodule.vocabulary_tokens) and "d" not in datamodule.vocabulary_tokens
        item = datamodule.dataset("val")[0]
        assert item["image"].shape == (3, 16, 16) and item["references"] == ["a red square d"]


def test_caption_data_folder_with_no_known_layout_says_what_it_expected(tmp_path):
    _image(tmp_path / "a.png")
    with pytest.raises(DataError, match=re.escape(f"{tmp_path}: no caption data set; expected captions.jsonl")):
        read_captions(tmp_path)


# ----------------------------------------------------------------------------- audiofolder


def test_audiofolder_split_folders_give_train_dev_and_test(tmp_path):
    for split in ("train", "validation", "test"):
        _audio(tmp_path / split / "clips" / "one.wav")
        (tmp_path / split / "metadata.csv").write_text(f"file_name,transcription,speaker\nclips/one.wav,Hello {split}!,7\n")
    (utt,) = read_audiofolder(tmp_path, "train")
    assert (utt.text, utt.speaker, utt.utt_id, utt.duration) == ("Hello train!", "7", "clips/one", None)
    assert utt.audio_path == str((tmp_path / "train" / "clips" / "one.wav").resolve())
    assert [read_corpus(tmp_path, split)[0].text for split in ("train", "dev", "test")] == [
        "Hello train!",
        "Hello validation!",
        "Hello test!",
    ]  # dev finds validation/


def test_audiofolder_metadata_in_the_folder_itself_is_the_training_split(tmp_path):
    _audio(tmp_path / "a.wav")
    _jsonl(tmp_path / "metadata.jsonl", [{"file_name": "a.wav", "transcription": "one two", "duration": 0.25}])
    (utt,) = read_corpus(tmp_path, "train")
    assert (utt.text, utt.duration, utt.utt_id) == ("one two", 0.25, "a")
    with pytest.raises(CorpusError, match="no corpus for split 'dev'"):
        read_corpus(tmp_path, "dev")


def test_audiofolder_row_without_transcription_names_file_and_line(tmp_path):
    _audio(tmp_path / "train" / "a.wav")
    metadata = _jsonl(
        tmp_path / "train" / "metadata.jsonl",
        [{"file_name": "a.wav", "transcription": "fine"}, {"file_name": "a.wav", "text": "wrong column"}],
    )
    with pytest.raises(CorpusError, match=_where(metadata, 2) + " expected a non-empty 'transcription'"):
        read_corpus(tmp_path, "train")


@pytest.mark.parametrize("case", ["missing file", "empty transcription", "bad duration", "too many fields"])
def test_audiofolder_bad_csv_row_names_file_and_line(tmp_path, case):
    _audio(tmp_path / "val" / "a.wav")
    row, expected = {
        "missing file": ("b.wav,hello,", "audio file 'b.wav' not found"),
        "empty transcription": ("a.wav,,", "expected a non-empty 'transcription'"),
        "bad duration": ("a.wav,hello,long", "'duration' must be a number of seconds"),
        "too many fields": ("a.wav,hello,1,2", "expected 3 fields, got 4"),
    }[case]
    metadata = tmp_path / "val" / "metadata.csv"
    metadata.write_text(f"file_name,transcription,duration\na.wav,fine,0.25\n{row}\n")
    with pytest.raises(CorpusError, match=_where(metadata, 3) + ".*" + re.escape(expected)):
        read_audiofolder(tmp_path, "dev")


def test_speech_data_module_trains_from_an_audiofolder(tmp_path):
    for split, texts in (("train", ["abc", "cab"]), ("validation", ["ab"]), ("test", ["ba"])):
        for i, _ in enumerate(texts):
            _audio(tmp_path / split / f"{i}.wav", seconds=0.5)
        _jsonl(tmp_path / split / "metadata.jsonl", [{"file_name": f"{i}.wav", "transcription": t} for i, t in enumerate(texts)])
    datamodule = SpeechDataModule(str(tmp_path), batch_size=2)
    datamodule.setup("fit")
    assert datamodule.vocabulary_tokens == ["a", "b", "c"]
    batch = next(iter(datamodule.val_dataloader()))
    assert batch.texts == ["ab"] and batch.label_lengths.tolist() == [2]


# ----------------------------------------------------------------------------- shared rules of both


def test_two_folders_of_one_split_are_refused(tmp_path):
    for name in ("val", "validation"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metadata.csv").write_text("file_name,text\n")
    with pytest.raises(ValueError, match="val/ and validation/ are both the validation split"):
        metadata_files(tmp_path)


def test_a_csv_row_spread_over_lines_is_named_by_its_first_line(tmp_path):
    table = tmp_path / "metadata.csv"
    table.write_text('file_name,text\na.png,"two\nlines"\nb.png,one\n')
    rows = read_rows(table, ("file_name", "text"))
    assert [(row.line, row.fields["text"]) for row in rows] == [(2, "two\nlines"), (4, "one")]
