"""Corpus readers: LibriSpeech trees, Common Voice TSVs, manifests and audiofolders -> Utterances.

Every reader returns a list of :class:`Utterance` with absolute audio paths and the transcript
exactly as the corpus wrote it (LibriSpeech upper case, Common Voice punctuated); text
normalisation is the data pipeline's job (:mod:`speech_attend.data.text`). Readers check that each
audio file exists, so a broken corpus fails at start-up with the file and line to fix, not an
hour into training.

:func:`read_corpus` picks the reader from what ``data_dir`` holds, in this order:

1. ``<split>.jsonl`` or ``<split>.csv`` -> :func:`read_manifest`.
2. A Hugging Face ``audiofolder``: ``<split>/metadata.jsonl`` or ``.csv`` (``dev`` also finds
   ``validation/``, ``valid/``, ``val/``), or for ``train`` a metadata file in ``data_dir`` itself
   -> :func:`read_audiofolder`.
3. ``<split>.tsv``: a header with ``path`` and ``sentence`` -> :func:`read_common_voice`
   (audio under ``clips/``); otherwise a TSV manifest -> :func:`read_manifest`.
4. A folder ``<split>/`` holding ``*.trans.txt`` -> :func:`read_librispeech` on that subset;
   failing that, every folder named ``<split>-*`` (``train`` -> ``train-clean-100``,
   ``train-clean-360``, ...) is read as one split. A ``LibriSpeech/`` folder (how the
   archives unpack) is looked into as well.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from shared.io.data_files import Row, metadata_files, read_rows, split_of_folder

__all__ = [
    "CorpusError",
    "Utterance",
    "read_librispeech",
    "read_common_voice",
    "read_manifest",
    "read_audiofolder",
    "read_corpus",
]

# LibriSpeech ships FLAC; converted copies of it are often WAV.
_LIBRISPEECH_AUDIO_SUFFIXES = (".flac", ".wav")


class CorpusError(ValueError):
    """A corpus is missing, malformed, or names audio that does not exist.

    The message names the file (and line, where there is one) to fix.
    """


@dataclass(frozen=True)
class Utterance:
    """One spoken sentence of a corpus.

    Args:
        audio_path (str): absolute path of the audio file.
        text (str): transcript as the corpus wrote it (not normalised).
        duration (float or None): seconds, when the corpus states it.
        speaker (str or None): speaker id, when the corpus states it.
        utt_id (str): id unique within the corpus.
    """

    audio_path: str
    text: str
    duration: float | None
    speaker: str | None
    utt_id: str


def _csv_field_limit() -> None:
    # Common Voice rows can exceed csv's default 128 KiB field limit only in broken files,
    # but a long sentence column must not crash the reader with an unrelated error.
    csv.field_size_limit(16 * 1024 * 1024)


# ----------------------------------------------------------------------------- LibriSpeech


def _librispeech_audio(folder: Path, utt_id: str) -> Path | None:
    for suffix in _LIBRISPEECH_AUDIO_SUFFIXES:
        candidate = folder / f"{utt_id}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def _read_transcript(path: Path) -> list[Utterance]:
    speaker = path.parent.parent.name
    utterances = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            utt_id, _, text = line.partition(" ")
            text = text.strip()
            if not text:
                raise CorpusError(
                    f"{path}:{lineno}: expected '<utterance-id> <TEXT>', got {line!r}"
                )
            audio = _librispeech_audio(path.parent, utt_id)
            if audio is None:
                raise CorpusError(
                    f"{path}:{lineno}: transcript entry {utt_id!r} has no audio file "
                    f"{path.parent / (utt_id + '.flac')}"
                )
            utterances.append(Utterance(str(audio.resolve()), text, None, speaker, utt_id))
    return utterances


def read_librispeech(root: str | os.PathLike, subsets: list[str] | None = None) -> list[Utterance]:
    """Read a LibriSpeech-layout tree.

    The layout is ``<root>/<subset>/<speaker>/<chapter>/<speaker>-<chapter>-<utt>.flac`` with
    one ``<speaker>-<chapter>.trans.txt`` per chapter whose lines are
    ``<utterance-id> <TEXT>``, split at the first space. The speaker is the speaker folder's
    name; durations are left ``None`` (use :func:`speech_attend.data.audio.audio_duration`).

    Args:
        root (str or PathLike): folder that holds the subset folders.
        subsets (list of str or None, optional): subset folder names to read, e.g.
            ``["train-clean-100"]``; ``None`` reads every folder under ``root``.
            (Default: ``None``)

    Returns:
        list of Utterance: sorted by transcript path, then by line.

    Raises:
        CorpusError: ``root`` or a subset is missing, a transcript line is malformed, a
            transcript names audio that does not exist, or no transcript was found.
    """
    root = Path(root)
    if not root.is_dir():
        raise CorpusError(f"{root}: LibriSpeech root folder not found")
    available = sorted(p.name for p in root.iterdir() if p.is_dir())
    names = available if subsets is None else list(subsets)
    for name in names:
        if name not in available:
            raise CorpusError(
                f"{root / name}: LibriSpeech subset not found; {root} has {available or 'no folders'}"
            )
    utterances: list[Utterance] = []
    for name in names:
        for transcript in sorted((root / name).rglob("*.trans.txt")):
            utterances.extend(_read_transcript(transcript))
    if not utterances:
        raise CorpusError(f"{root}: no '*.trans.txt' transcripts in subsets {names}")
    return utterances


# ----------------------------------------------------------------------------- Common Voice


def read_common_voice(root: str | os.PathLike, split: str = "train") -> list[Utterance]:
    """Read a Common Voice release: ``<root>/<split>.tsv`` with audio in ``<root>/clips/``.

    Columns are found by header name, since their set and order changed between releases:
    ``path`` and ``sentence`` are required, ``client_id`` (the speaker) is used when present.
    Quote characters are literal, as in the release files.

    Args:
        root (str or PathLike): the language folder (holding ``clips/`` and the TSVs).
        split (str, optional): TSV name without suffix: ``train``, ``dev``, ``test``,
            ``validated``, ... (Default: ``"train"``)

    Returns:
        list of Utterance: in file order; ``utt_id`` is the clip name without suffix.

    Raises:
        CorpusError: the TSV is missing, lacks a required column, has a malformed row, or
            names a clip that does not exist.
    """
    root = Path(root)
    tsv = root / f"{split}.tsv"
    if not tsv.is_file():
        raise CorpusError(f"{tsv}: Common Voice split file not found")
    _csv_field_limit()
    utterances = []
    with open(tsv, encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if header is None:
            raise CorpusError(f"{tsv}: file is empty; expected a header row with 'path' and 'sentence'")
        missing = [c for c in ("path", "sentence") if c not in header]
        if missing:
            raise CorpusError(f"{tsv}:1: header lacks column(s) {missing}; found {header}")
        col_path, col_text = header.index("path"), header.index("sentence")
        col_speaker = header.index("client_id") if "client_id" in header else None
        for lineno, row in enumerate(rows, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise CorpusError(
                    f"{tsv}:{lineno}: expected {len(header)} tab-separated fields, got {len(row)}"
                )
            clip, text = row[col_path].strip(), row[col_text].strip()
            if not clip or not text:
                raise CorpusError(f"{tsv}:{lineno}: empty 'path' or 'sentence' field")
            audio = root / "clips" / clip
            if not audio.is_file():
                raise CorpusError(f"{tsv}:{lineno}: clip {clip!r} not found at {audio}")
            speaker = (row[col_speaker].strip() or None) if col_speaker is not None else None
            utterances.append(
                Utterance(str(audio.resolve()), text, None, speaker, Path(clip).stem)
            )
    if not utterances:
        raise CorpusError(f"{tsv}: no rows after the header")
    return utterances


# ----------------------------------------------------------------------------- manifests and audiofolder


def _utterance(row: Row, audio_column: str, text_column: str, utt_id: Callable[[Path], str]) -> Utterance:
    """The utterance of a manifest or metadata ``row``: its audio file and transcript (both
    required), its optional ``duration`` (seconds), ``speaker`` and ``id`` (else ``utt_id(audio)``)."""
    audio_path = row.file(audio_column, "audio", CorpusError)
    text = row.text(text_column, CorpusError)
    duration = row.fields.get("duration")
    if duration in (None, ""):
        duration = None
    else:
        try:
            duration = float(duration)
        except (TypeError, ValueError):
            raise CorpusError(f"{row.where}: 'duration' must be a number of seconds, got {duration!r}") from None
    speaker = row.fields.get("speaker")
    speaker = str(speaker) if speaker not in (None, "") else None
    given = row.fields.get("id")
    return Utterance(str(audio_path.resolve()), text, duration, speaker, str(given) if given not in (None, "") else utt_id(audio_path))


def read_manifest(path: str | os.PathLike) -> list[Utterance]:
    """Read a manifest: JSON Lines, CSV or TSV, one utterance per line/row.

    Each entry has ``audio`` (a path; relative paths resolve against the manifest's folder)
    and ``text``; ``duration`` (seconds), ``speaker`` and ``id`` are optional. CSV and TSV
    files start with a header row naming these columns, in any order. Without ``id`` the
    utterance id is the audio file name without suffix::

        {"audio": "clips/0001.wav", "text": "turn the lights off", "speaker": "anna"}

    Args:
        path (str or PathLike): a ``.jsonl``, ``.csv`` or ``.tsv`` file.

    Returns:
        list of Utterance: in file order.

    Raises:
        CorpusError: the file is missing, has an unknown suffix, or a line is malformed or
            names audio that does not exist (the message gives the line number).
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: manifest file not found")
    return [_utterance(row, "audio", "text", lambda audio: audio.stem) for row in read_rows(path, ("audio", "text"), CorpusError)]


def read_audiofolder(root: str | os.PathLike, split: str = "train") -> list[Utterance]:
    """Read a Hugging Face ``audiofolder``: audio files with a ``metadata.jsonl`` or ``metadata.csv``.

    Each row has ``file_name`` (relative to the metadata file's folder) and ``transcription``;
    ``duration``, ``speaker`` and ``id`` are optional, as in a manifest. The splits are the
    sub-folders ``train/``, ``validation/`` (or ``valid/``, ``val/``, ``dev/``) and ``test/``, each
    with its metadata file; a metadata file in ``root`` itself is the training split alone
    (:func:`shared.io.data_files.metadata_files`)::

        root/train/metadata.csv            file_name,transcription
        root/train/0001.wav                0001.wav,turn the lights off
        root/validation/metadata.csv ...

    Without ``id`` the utterance id is ``file_name`` without its suffix.

    Args:
        root (str or PathLike): the folder.
        split (str, optional): ``train``, ``dev``/``validation``/``val`` or ``test``. (Default: ``"train"``)

    Raises:
        CorpusError: the split has no metadata file, a row lacks ``file_name`` or ``transcription``,
            or names audio that does not exist (the message gives the file and line).
    """
    root = Path(root)
    wanted = split_of_folder(split)
    metadata = metadata_files(root, CorpusError).get(wanted) if wanted else None
    if metadata is None:
        raise CorpusError(f"{root}: no audiofolder split {split!r}; expected {split}/metadata.jsonl or {split}/metadata.csv")

    def name(audio: Path) -> str:  # unique in the folder, where file names repeat in sub-folders
        return audio.relative_to(metadata.parent).with_suffix("").as_posix() if audio.is_relative_to(metadata.parent) else audio.stem

    return [_utterance(row, "file_name", "transcription", name) for row in read_rows(metadata, ("file_name", "transcription"), CorpusError)]


# ----------------------------------------------------------------------------- dispatch


def _tsv_header(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="") as f:
        return [h.strip() for h in f.readline().rstrip("\r\n").split("\t")]


def _librispeech_subsets(root: Path, split: str) -> list[str]:
    if (root / split).is_dir() and any((root / split).rglob("*.trans.txt")):
        return [split]
    return sorted(p.name for p in root.glob(f"{split}-*") if p.is_dir())


def read_corpus(data_dir: str | os.PathLike, split: str) -> list[Utterance]:
    """Read one split of whatever corpus ``data_dir`` holds (rule in the module docstring).

    Args:
        data_dir (str or PathLike): corpus folder.
        split (str): split name, e.g. ``train``, ``dev``, ``test``.

    Returns:
        list of Utterance: the split's utterances.

    Raises:
        CorpusError: nothing in ``data_dir`` matches the split, or the matching corpus is
            malformed.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise CorpusError(f"{data_dir}: corpus folder not found")
    for suffix in (".jsonl", ".csv"):
        if (data_dir / f"{split}{suffix}").is_file():
            return read_manifest(data_dir / f"{split}{suffix}")
    wanted = split_of_folder(split)
    if wanted is not None and wanted in metadata_files(data_dir, CorpusError):
        return read_audiofolder(data_dir, split)
    tsv = data_dir / f"{split}.tsv"
    if tsv.is_file():
        header = _tsv_header(tsv)
        if "path" in header and "sentence" in header:
            return read_common_voice(data_dir, split)
        return read_manifest(tsv)
    for root in (data_dir, data_dir / "LibriSpeech"):
        if root.is_dir():
            subsets = _librispeech_subsets(root, split)
            if subsets:
                return read_librispeech(root, subsets)
    raise CorpusError(
        f"{data_dir}: no corpus for split {split!r}; expected {split}.jsonl, {split}.csv, "
        f"{split}.tsv (manifest or Common Voice), {split}/metadata.jsonl or .csv (audiofolder), "
        f"or a LibriSpeech folder {split}/ or {split}-*/"
    )
