"""Streaming shards (``prepare shards``, ``data.shards``) for both apps: what is written, what is
read back, and what is refused.

* every reader's layout is written whole: each example once, its file's bytes as they were on disk,
  the marker (app, fingerprint, vocabulary counts) last; a second run with the same inputs writes
  nothing; a full disk leaves no folder and no index behind and says so in one line;
* the loaders decode through the apps' own readers: the vocabulary and the evaluation batches
  are those of the file readers, an undecodable file is skipped and named, never fatal;
* the training stream's position resumes mid-window exactly where it stopped, and duration
  buckets are made equal in number when the ranks' counts differ;
* a folder written by the other app, for another vocabulary, with a missing, cut or corrupt
  chunk, or without its marker, is refused before training in one line that names it.

The two-process DDP run killed mid-epoch and resumed is in ``test_shards_resume.py``.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import random
import shutil
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import soundfile as sf
import torch
import yaml
from PIL import Image

from shared.io.bad_samples import BadSample
from shared.io.shards.layout import MARKER, ShardError, open_shards
from shared.io.shards.stream import ShardStream, _equalize
from show_attend.cli import main as caption_main
from show_attend.data.readers import read_captions
from show_attend.data.shards import write_caption_shards
from show_attend.train.datamodule import CaptionDataModule
from speech_attend.cli import main as speech_main
from speech_attend.data.readers import read_corpus
from speech_attend.data.shards import SpeechShards, duration_buckets, write_speech_shards
from speech_attend.data.text import normalize_text
from speech_attend.train.datamodule import SpeechDataModule

SPEECH_SETTINGS = {"lowercase": True, "keep_punctuation": "'"}


def _speech_shards(corpus: Path, out: Path, **options) -> Path:
    written, _ = write_speech_shards(corpus, str(out), progress=False, **options)
    assert written
    return out


def _stored_items(folder: Path) -> list[dict]:
    """Every item of one split, in order, as LitData reads it back."""
    from litdata import StreamingDataset

    items = StreamingDataset(str(folder))
    return [items[i] for i in range(len(items))]


def _one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def speech_shards(tiny_synth, tmp_path_factory) -> Path:
    return _speech_shards(tiny_synth, tmp_path_factory.mktemp("speech_shards") / "shards")


@pytest.fixture(scope="module")
def caption_shards(tiny_shapes, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("caption_shards") / "shards"
    assert write_caption_shards(tiny_shapes, str(out), progress=False)[0]
    return out


# ----------------------------------------------------------------------------- writing


def test_speech_shards_hold_every_utterance_once_with_its_file_bytes_and_text(tiny_synth, speech_shards):
    marker = json.loads((speech_shards / MARKER).read_text())
    assert marker["app"] == "speech-attend" and set(marker["splits"]) == {"train", "dev", "test"}
    for split in ("train", "dev", "test"):
        utterances = {u.utt_id: u for u in read_corpus(tiny_synth, split)}
        items = _stored_items(speech_shards / split)
        assert sorted(item["key"] for item in items) == sorted(utterances)  # each once
        assert [item["index"] for item in items] == list(range(len(items)))
        for item in items:
            utterance = utterances[item["key"]]
            assert item["audio"] == Path(utterance.audio_path).read_bytes()  # the bytes as on disk, not re-encoded
            assert item["text"] == utterance.text and item["source"] == utterance.audio_path
        assert marker["splits"][split]["items"] == len(utterances)
        lengths = marker["splits"][split]["lengths"]
        assert lengths == [pytest.approx(sf.info(utterances[item["key"]].audio_path).duration, abs=1e-3) for item in items]
    texts = [normalize_text(u.text) for u in read_corpus(tiny_synth, "train")]
    assert marker["vocabulary"]["counts"] == dict(Counter(c for text in texts for c in text))


def test_caption_shards_hold_every_image_once_with_its_file_bytes_and_references(tiny_shapes, caption_shards):
    records, _ = read_captions(tiny_shapes)
    marker = json.loads((caption_shards / MARKER).read_text())
    assert marker["app"] == "show-attend"
    for split in ("train", "val", "test"):
        expected = {str(r.path): r for r in records if r.split == split}
        items = _stored_items(caption_shards / split)
        assert sorted(item["key"] for item in items) == sorted(expected)
        for item in items:
            record = expected[item["key"]]
            assert item["image"] == record.path.read_bytes()
            assert json.loads(item["references"]) == record.references and json.loads(item["objects"]) == record.objects
    words = Counter(t for r in records if r.split == "train" for tokens in r.references for t in tokens)
    assert marker["vocabulary"]["counts"] == dict(words)


def _tone(path: Path, seconds: float = 0.3) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * 16000)) / 16000
    sf.write(path, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
    return path


def _speech_layout(root: Path, layout: str) -> Path:
    """Three training utterances in one of the recognizer's layouts (LibriSpeech is the built-in corpus)."""
    texts = ["turn left", "stop now", "go on"]
    if layout == "manifest":
        rows = [{"audio": str(_tone(root / f"clips/{i}.wav")), "text": t} for i, t in enumerate(texts)]
        (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif layout == "audiofolder":
        for i in range(3):
            _tone(root / "train" / f"{i}.wav")
        (root / "train" / "metadata.csv").write_text(
            "file_name,transcription\n" + "".join(f"{i}.wav,{t}\n" for i, t in enumerate(texts))
        )
    else:  # Common Voice
        for i in range(3):
            _tone(root / "clips" / f"{i}.wav")
        (root / "train.tsv").write_text(
            "client_id\tpath\tsentence\n" + "".join(f"s{i}\t{i}.wav\t{t}\n" for i, t in enumerate(texts))
        )
    return root


@pytest.mark.parametrize("layout", ["manifest", "audiofolder", "common voice"])
def test_every_speech_layout_is_written_as_shards(tmp_path, layout):
    corpus = _speech_layout(tmp_path / "corpus", layout)
    _speech_shards(corpus, tmp_path / "shards")
    keys = sorted(item["key"] for item in _stored_items(tmp_path / "shards" / "train"))
    assert keys == sorted(u.utt_id for u in read_corpus(corpus, "train"))
    assert set(json.loads((tmp_path / "shards" / MARKER).read_text())["splits"]) == {"train"}


@pytest.mark.parametrize("layout", ["manifest", "imagefolder"])
def test_every_caption_layout_is_written_as_shards(tmp_path, layout):
    root = tmp_path / "data"
    for i, colour in enumerate(["red", "blue", "green"]):
        (root / "train").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), colour).save(root / "train" / f"{i}.png")
    if layout == "manifest":
        rows = [
            {"image": f"train/{i}.png", "text": f"a {c} square", "split": "train"} for i, c in enumerate(["red", "blue", "green"])
        ]
        (root / "captions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        (root / "train" / "metadata.csv").write_text(
            "file_name,text\n0.png,a red square\n1.png,a blue square\n2.png,a green one\n"
        )
    assert write_caption_shards(root, str(tmp_path / "shards"), progress=False)[1] == {"train": 3}
    assert len(_stored_items(tmp_path / "shards" / "train")) == 3


def test_a_second_run_with_the_same_inputs_writes_nothing_and_changed_inputs_need_overwrite(tiny_synth, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    shutil.copytree(tiny_synth, corpus)
    out = tmp_path / "shards"
    command = ["prepare", "shards", "--data", str(corpus), "--out", str(out), "--quiet"]
    assert speech_main(command) == 0
    written = (out / MARKER).stat().st_mtime_ns
    assert speech_main(command) == 0
    assert "nothing written" in capsys.readouterr().out and (out / MARKER).stat().st_mtime_ns == written

    transcript = next(corpus.rglob("*.trans.txt"))  # an input changes
    first, rest = transcript.read_text().split("\n", 1)
    transcript.write_text(f"{first} AGAIN\n{rest}")
    assert speech_main(command) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"speech-attend: error: {out}: holds shards written from other inputs") and "--overwrite" in line
    assert speech_main([*command, "--overwrite"]) == 0
    assert json.loads((out / MARKER).read_text())["fingerprint"] != ""
    assert (out / MARKER).stat().st_mtime_ns != written
    assert not list(tmp_path.glob(".shards.*"))  # neither the new folder's draft nor the old folder is left beside it


def test_a_full_disk_leaves_no_shards_and_says_so_in_one_line(tiny_synth, tmp_path, monkeypatch, capsys):
    from litdata.streaming import writer

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writer.BinaryWriter, "write_chunk", full)  # the writing processes are forked: they inherit it
    out = tmp_path / "shards"
    assert speech_main(["prepare", "shards", "--data", str(tiny_synth), "--out", str(out), "--quiet"]) == 2
    line = _one_error_line(capsys)
    assert line == f"speech-attend: error: could not write the shards {out}: no space left on device (nothing was kept)"
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no folder, no draft, so no index of missing chunks
    assert multiprocessing.active_children() == []  # LitData's writing processes do not outlive the failure


# ----------------------------------------------------------------------------- reading


def test_speech_vocabulary_and_evaluation_batches_from_shards_are_those_of_the_files(tiny_synth, speech_shards):
    files = SpeechDataModule(str(tiny_synth), batch_size=2, eval_batch_size=2)
    shards = SpeechDataModule(shards=str(speech_shards), batch_size=2, eval_batch_size=2)
    assert shards.vocabulary_tokens == files.vocabulary_tokens
    for module in (files, shards):
        module.setup("fit")
    for from_files, from_shards in zip(files.val_dataloader(), shards.val_dataloader(), strict=True):
        assert from_shards.keys == from_files.keys and from_shards.texts == from_files.texts
        assert torch.equal(from_shards.waveforms, from_files.waveforms) and torch.equal(from_shards.inputs, from_files.inputs)
    assert shards.training_durations() == [max(files.training_durations())]


def test_caption_vocabulary_and_evaluation_items_from_shards_are_those_of_the_files(tiny_shapes, caption_shards):
    files = CaptionDataModule(str(tiny_shapes), image_size=32, batch_size=4, min_word_freq=1)
    shards = CaptionDataModule(image_size=32, batch_size=4, min_word_freq=1, shards=str(caption_shards))
    assert shards.vocabulary_tokens == files.vocabulary_tokens
    from_files, from_shards = next(iter(files.val_dataloader())), next(iter(shards.val_dataloader()))
    assert from_shards["keys"] == from_files["keys"] and from_shards["references"] == from_files["references"]
    assert torch.equal(from_shards["images"], from_files["images"]) and torch.equal(
        from_shards["captions"], from_files["captions"]
    )
    assert from_shards["sizes"] == from_files["sizes"] and from_shards["objects"] == from_files["objects"]


def test_caption_training_batches_cover_the_split_each_epoch_and_reshuffle(caption_shards, tiny_shapes):
    module = CaptionDataModule(image_size=32, batch_size=5, min_word_freq=1, shards=str(caption_shards))
    stream = module.train_dataloader()
    images = sum(r.split == "train" for r in read_captions(tiny_shapes)[0])
    epochs = []
    for epoch in (0, 1):
        stream.set_epoch(epoch)
        epochs.append([int(i) for batch in stream for i in batch["index"]])
    assert len(stream) == -(-images // 5) and all(sorted(order) == list(range(images)) for order in epochs)
    assert epochs[0] != epochs[1]


def test_an_undecodable_file_is_skipped_and_named_not_fatal(tiny_synth, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(tiny_synth, corpus)
    broken = sorted((corpus / "train").rglob("*.flac"))[0]
    broken.write_bytes(b"not audio at all" * 64)
    module = SpeechDataModule(shards=str(_speech_shards(corpus, tmp_path / "shards")), batch_size=2, shard_window=4)
    module.setup("fit")
    batches = list(module.train_dataloader())
    skipped = [sample for batch in batches for sample in batch.skipped]
    assert [sample.path for sample in skipped] == [str(broken)] and "not a readable audio file" in skipped[0].reason
    assert sum(batch.batch_size for batch in batches) == len(read_corpus(corpus, "train")) - 1


class RecordImages(pl.Callback):
    """Append each training batch's image indices to ``<out>/images.jsonl`` (loaded by the runs below)."""

    def __init__(self, out: str):
        self.out = Path(out)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        with self.out.open("a") as f:
            f.write(json.dumps({"step": trainer.global_step, "images": batch["index"].tolist()}) + "\n")


def _caption_fit(shards: Path, run: Path, record: Path, max_steps: int, *extra: str) -> None:
    config = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": max_steps,
            "limit_val_batches": 0,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(run),
            "callbacks": [{"class_path": "tests.shared.test_shards.RecordImages", "init_args": {"out": str(record)}}],
        },
        "checkpoint": {"every_n_train_steps": 1},
        "model": {
            "encoder": {"backbone": "small", "grid_size": 4, "small_channels": 8, "channels_last": False},
            "decoder": {"embed_dim": 8, "attention_dim": 8, "hidden_dim": 8},
            "decoding": {"beam_size": 1, "max_length": 4},
        },
        "data": {"shards": str(shards), "image_size": 32, "batch_size": 5, "min_word_freq": 1},
    }
    path = run.parent / f"{run.name}-{max_steps}.yaml"
    path.write_text(yaml.safe_dump(config))
    assert caption_main(["fit", "--config", str(path), *extra]) == 0


def test_a_captioner_run_stopped_mid_epoch_resumes_from_the_next_unseen_image(caption_shards, tmp_path):
    _caption_fit(caption_shards, tmp_path / "straight", tmp_path / "straight.jsonl", 8)
    _caption_fit(caption_shards, tmp_path / "stopped", tmp_path / "stopped.jsonl", 3)  # 3 of the first epoch's 5 batches
    _caption_fit(caption_shards, tmp_path / "stopped", tmp_path / "stopped.jsonl", 8, "--ckpt_path", "last")
    straight, stopped = (
        [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()] for name in ("straight", "stopped")
    )
    assert [r["step"] for r in stopped] == list(range(8))  # no batch twice: the resumed run started at step 3
    assert stopped == straight  # the same images in the same batches, across the end of the first epoch
    first_epoch = [i for r in straight[:5] for i in r["images"]]
    assert sorted(first_epoch) == list(range(24))  # every training image once in the first epoch


# ----------------------------------------------------------------------------- the stream's position and buckets


def _stream(folder: Path, window: int = 3) -> ShardStream:
    def plan(items, rng):  # two or one keys a batch: a window's batch count varies
        items = sorted(items)
        cut = rng.choice([1, 2])
        return [items[:cut], items[cut:]] if len(items) > cut else [items]

    return ShardStream(str(folder), window, _key, plan, list, "the shards", seed=3)


def _key(item: dict, epoch: int) -> str:
    return item["key"]


def _take(stream: ShardStream, count: int, state: dict | None = None) -> tuple[list, dict]:
    """``count`` batches trained on, as Lightning takes them (one batch read ahead of the one trained
    on), from a stream given ``state``; the batches and the state a checkpoint would then hold."""
    if state is not None:
        stream.load_state_dict(json.loads(json.dumps(state)))  # plain data, as in a checkpoint
    batches = iter(stream)
    read = [next(batches, None)]
    for _ in range(count):
        read.append(next(batches, None))
        stream.mark_consumed()
    return read[:count], stream.state_dict()


def test_a_stream_stopped_twice_goes_on_each_time_from_the_next_unseen_batch(speech_shards):
    folder = speech_shards / "train"
    whole = []
    straight = _stream(folder)
    for batch in straight:
        straight.mark_consumed()
        whole.append(batch)
    for taken in range(1, len(whole)):
        first, state = _take(_stream(folder), taken)
        more = min(3, len(whole) - taken)  # enough to read past the window it resumed in
        second, state = _take(_stream(folder), more, state)
        resumed = _stream(folder)
        resumed.load_state_dict(json.loads(json.dumps(state)))
        rest = [] if state["complete"] else list(resumed)  # a stream stopped after its last batch starts the next epoch
        assert first + second + rest == whole, f"stopped after {taken}, then {more} batches"
        assert state["complete"] == (taken + more == len(whole))


def test_a_position_saved_in_other_shards_is_refused(speech_shards):
    stream = _stream(speech_shards / "train")
    with pytest.raises(ShardError, match="the checkpoint's data position is in other shards"):
        stream.load_state_dict({**stream.state_dict(), "fingerprint": "elsewhere"})


def test_duration_buckets_hold_similar_lengths_within_the_frame_budget():
    waves = [(torch.zeros(n * 160), str(n), str(n)) for n in (50, 400, 60, 380, 55, 390, 900)]  # frames of 10 ms
    batches = duration_buckets(waves, random.Random(0), batch_size=3, max_frames=1200, sample_rate=16000)
    frames = [[len(w) // 160 for w, _, _ in batch] for batch in batches]
    assert frames == [[50, 55, 60], [380, 390, 400], [900]]
    assert all(len(batch) * max(batch) <= 1200 or len(batch) == 1 for batch in frames)


def test_ranks_with_fewer_buckets_split_their_largest_or_add_empty_ones():
    assert _equalize([[1, 2, 3, 4], [5]], 3) == [[1, 2], [3, 4], [5]]
    assert _equalize([[1]], 3) == [[1], [], []]


def test_a_window_is_cut_into_as_many_batches_as_the_rank_with_most(speech_shards):
    asked = []

    def agree(count: int) -> int:  # another rank made two more batches of each window
        asked.append(count)
        return count + 2

    stream = ShardStream(str(speech_shards / "train"), 3, _key, lambda items, rng: [sorted(items)], list, "fp", agree=agree)
    batches = list(stream)
    assert asked == [1, 1, 1] and len(batches) == 9  # 8 utterances: windows of 3, 3 and 2, each now 3 batches
    assert sorted(key for batch in batches for key in batch) == sorted(u["key"] for u in _stored_items(speech_shards / "train"))
    assert [] in batches  # the last window's 2 utterances could only be split once


# ----------------------------------------------------------------------------- refused folders


def test_shards_of_the_other_app_are_refused_before_training_in_one_line(speech_shards, tmp_path, capsys):
    config = tmp_path / "fit.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"accelerator": "cpu", "max_steps": 1, "default_root_dir": str(tmp_path)}}))
    assert caption_main(["fit", "--config", str(config), "--data.shards", str(speech_shards)]) == 2
    line = _one_error_line(capsys)
    assert line == (
        f"show-attend: error: {speech_shards}: shards written by speech-attend (speech); expected show-attend shards "
        f"(image captions), written by `show-attend prepare shards --data DIR --out {speech_shards}`"
    )
    assert not (tmp_path / "version_0").exists()


def test_shards_of_another_vocabulary_are_refused_naming_what_the_model_lacks(speech_shards, caption_shards):
    module = SpeechDataModule(shards=str(speech_shards), vocabulary=["a", "b", " "])
    with pytest.raises(
        ShardError, match=rf"^{speech_shards}: its training text has \d+ characters that the model's vocabulary lacks"
    ):
        module.setup("fit")
    with pytest.raises(ShardError, match="words that the model's vocabulary lacks"):
        CaptionDataModule(image_size=32, min_word_freq=1, shards=str(caption_shards), vocabulary=["a", "square"])


def test_shards_written_with_another_normalisation_are_refused(speech_shards):
    with pytest.raises(ShardError, match=r"normalised with lowercase True .*expected this run's data.lowercase False"):
        SpeechDataModule(shards=str(speech_shards), lowercase=False).vocabulary  # noqa: B018


@pytest.mark.parametrize("damage", ["missing", "cut short", "corrupt header", "no marker", "index"])
def test_a_damaged_shard_folder_is_refused_naming_the_file_and_what_was_expected(speech_shards, tmp_path, damage):
    folder = tmp_path / "shards"
    shutil.copytree(speech_shards, folder)
    index = json.loads((folder / "train" / "index.json").read_text())
    chunk = index["chunks"][0]
    path = folder / "train" / chunk["filename"]
    expected = f"expected a chunk of {chunk['chunk_bytes']} bytes holding {chunk['chunk_size']} items"
    if damage == "missing":
        path.unlink()
        message = f"{path}: missing; {expected}"
    elif damage == "cut short":
        path.write_bytes(path.read_bytes()[:-10])
        message = f"{path}: {chunk['chunk_bytes'] - 10} bytes; {expected} (cut short or replaced)"
    elif damage == "corrupt header":
        data = bytearray(path.read_bytes())
        data[:4] = struct.pack("<I", chunk["chunk_size"] + 7)
        path.write_bytes(bytes(data))
        message = f"{path}: its header does not describe {chunk['chunk_size']} items in {chunk['chunk_bytes']} bytes"
    elif damage == "no marker":
        (folder / MARKER).unlink()
        message = f"{folder}: no {MARKER}; expected a shard folder written by `speech-attend prepare shards"
    else:
        index["chunks"] = index["chunks"][1:]
        (folder / "train" / "index.json").write_text(json.dumps(index))
        message = f"{folder / 'train' / 'index.json'}: lists "
    with pytest.raises(ShardError) as raised:
        open_shards(folder, "speech-attend")
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_a_chunk_changed_in_place_costs_its_items_not_the_run(speech_shards, tmp_path):
    folder = tmp_path / "shards"
    shutil.copytree(speech_shards, folder)
    chunk = json.loads((folder / "train" / "index.json").read_text())["chunks"][0]
    path = folder / "train" / chunk["filename"]
    data = bytearray(path.read_bytes())
    header = 4 * (chunk["chunk_size"] + 2)
    data[header + 64 : len(data) - 64] = bytes(len(data) - header - 128)  # the same size and header, zeros inside
    path.write_bytes(bytes(data))
    items = SpeechShards(str(folder), {**SPEECH_SETTINGS, "train_split": "train"}).shards.split("train")["items"]
    module = SpeechDataModule(shards=str(folder), batch_size=2, shard_window=4)
    module.setup("fit")
    batches = list(module.train_dataloader())
    skipped = [sample for batch in batches for sample in batch.skipped]
    assert skipped and all(isinstance(sample, BadSample) for sample in skipped)
    assert sum(batch.batch_size for batch in batches) + len(skipped) <= items  # no item trained on twice
