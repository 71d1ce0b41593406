"""Reading caption data sets -> :class:`CaptionRecord`: Karpathy split files, manifests, imagefolders.

:func:`read_captions` picks the reader from what ``data_dir`` holds, in this order (the
recognizer's :func:`speech_attend.data.readers.read_corpus` does the same with its layouts):

1. ``captions.jsonl``, ``captions.csv`` or ``captions.tsv`` -> :func:`read_manifest`: one row per
   image-caption pair, ``{"image": "images/0001.jpg", "text": "A dog runs.", "split": "train"}``.
2. A Hugging Face ``imagefolder``: ``metadata.jsonl`` or ``metadata.csv`` in each split folder
   (``train/``, ``validation/`` or ``val/``, ``test/``) or in ``data_dir`` itself (training only),
   with ``file_name`` and ``text`` -> :func:`read_imagefolder`.
3. One ``dataset_*.json`` -> :func:`read_karpathy`, the images in the folder :func:`find_image_dir` finds.

In the first two, several rows naming one image are its several reference captions, and image
paths are relative to the file that names them; a bad row stops the reading with its file and
line. Every data set of the field comes as a Karpathy split file (``dataset_coco.json``,
``dataset_flickr8k.json``, ``dataset_flickr30k.json``, or the built-in ``dataset_shapes.json``
from :mod:`show_attend.builtin.shapes`)::

    {"images": [{"filename": "...jpg", "filepath": "val2014",    # filepath: COCO only
                 "split": "train|val|test|restval",               # restval joins train
                 "sentences": [{"tokens": ["a", "dog"], "raw": "A dog."}, ...],
                 "objects": [{"box": [x0, y0, x1, y1], "words": [1, 2, 3]}, ...]}]}  # shapes only

Images live under ``filepath/filename`` or just ``filename`` in an image folder, which
:func:`find_image_dir` finds among the layouts the data sets come in (``Images/`` and
``Flicker8k_Dataset/`` for Flickr8k, ``flickr30k-images/``, ``train2014/`` beside
``val2014/`` for COCO, ``images/`` for the built-in shapes, or the data folder itself).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from shared.io.data_files import MANIFEST_SUFFIXES, Row, metadata_files, read_rows

__all__ = [
    "DataError",
    "CaptionRecord",
    "read_karpathy",
    "read_manifest",
    "read_imagefolder",
    "read_captions",
    "find_karpathy_file",
    "find_image_dir",
]


_SPLITS = {"train": "train", "restval": "train", "val": "val", "test": "test"}  # restval folds into train
_MANIFEST_SPLITS = {**_SPLITS, "validation": "val"}  # the Hugging Face name too
_FOLDER_SPLITS = {"train": "train", "validation": "val", "test": "test"}  # shared.io.data_files' split -> ours
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


class DataError(ValueError):
    """A malformed split file or data folder; the message names the file and entry."""


@dataclass
class CaptionRecord:
    """One image and its reference captions.

    Args:
        path (Path): the image file.
        split (str): ``train``, ``val`` or ``test`` (``restval`` already folded into ``train``).
        references (list of list of str): tokenised, lower-case reference captions.
        objects (list of dict): shapes data only: per object ``box`` (pixels) and ``words``
            (indices into ``references[0]``).
    """

    path: Path
    split: str
    references: list[list[str]]
    objects: list[dict] = field(default_factory=list)


def _words(text: str) -> list[str]:
    """A caption as lower-case words, as Karpathy's split files tokenise theirs."""
    return _WORD.findall(text.lower())


def _tokens(sentence: dict) -> list[str]:
    tokens = sentence.get("tokens")
    if isinstance(tokens, list) and tokens:
        return [str(t).lower() for t in tokens]
    return _words(str(sentence.get("raw", "")))


def read_karpathy(json_path: str | Path, image_dir: str | Path) -> list[CaptionRecord]:
    """Read a Karpathy-format split file (COCO, Flickr8k/30k or shapes form).

    Args:
        json_path (str or Path): the ``dataset_*.json`` file.
        image_dir (str or Path): folder holding the images (COCO: holding the ``filepath`` folders).

    Returns:
        list of CaptionRecord: in file order; ``restval`` images are in the ``train`` split.

    Raises:
        DataError: the file is missing, not JSON, or an entry lacks a field (the message names
            the entry).
    """
    json_path, image_dir = Path(json_path), Path(image_dir)
    try:
        data = json.loads(json_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{json_path}: split file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{json_path}: not valid JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise DataError(f"{json_path}: expected a Karpathy split file, a JSON object with an 'images' list")
    records = []
    for i, entry in enumerate(data["images"]):
        where = f"{json_path}: images[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
            raise DataError(f"{where}: expected an object with a 'filename' string")
        where += f" ({entry['filename']})"
        split = _SPLITS.get(entry.get("split"))
        if split is None:
            raise DataError(f"{where}: 'split' is {entry.get('split')!r}; expected train, val, test or restval")
        sentences = entry.get("sentences")
        if not isinstance(sentences, list) or not all(isinstance(s, dict) for s in sentences):
            raise DataError(f"{where}: expected a 'sentences' list of objects with 'tokens' or 'raw'")
        references = [tokens for tokens in map(_tokens, sentences) if tokens]
        if not references:
            raise DataError(f"{where}: no sentence has any words")
        path = image_dir / entry.get("filepath", "") / entry["filename"]
        records.append(CaptionRecord(path, split, references, list(entry.get("objects") or [])))
    return records


# ----------------------------------------------------------------------------- manifests and imagefolder


def _grouped(rows: list[Row], image_column: str, splits: list[str]) -> list[CaptionRecord]:
    """Rows of one caption each (``splits[i]`` is row i's) -> one record per image with all its
    captions, in the order the images first appear."""
    records: dict[Path, CaptionRecord] = {}
    first_line: dict[Path, str] = {}
    for row, split in zip(rows, splits):
        path = row.file(image_column, "image", DataError).resolve()  # one image, however the rows spell its path
        words = _words(row.text("text", DataError))
        if not words:
            raise DataError(f"{row.where}: the caption {row.fields['text']!r} has no words")
        record = records.get(path)
        if record is None:
            records[path], first_line[path] = CaptionRecord(path, split, [words]), row.where
        elif record.split != split:
            raise DataError(f"{row.where}: {path.name} is in the {split} split here, in {record.split} at {first_line[path]}; "
                            "expected one split per image")
        else:
            record.references.append(words)
    return list(records.values())


def read_manifest(path: str | Path) -> list[CaptionRecord]:
    """Read a caption manifest: JSON Lines, CSV or TSV, one image-caption pair per line/row.

    Each row has ``image`` (a path; relative paths resolve against the manifest's folder),
    ``text`` (the caption as written; it is lower-cased and split into words) and ``split``
    (``train``, ``val`` or ``validation``, ``test``, or ``restval``, which joins train). CSV and
    TSV files start with a header row naming the columns, in any order; other columns are
    ignored. An image named on several rows has all those captions as its references::

        {"image": "images/0001.jpg", "text": "A dog runs on the grass.", "split": "train"}
        {"image": "images/0001.jpg", "text": "A brown dog running.", "split": "train"}

    Args:
        path (str or Path): a ``.jsonl``, ``.csv`` or ``.tsv`` file.

    Returns:
        list of CaptionRecord: one per image, in the order the images first appear.

    Raises:
        DataError: the file is missing or has an unknown suffix, or a row lacks a field, names an
            image that does not exist, has a caption without words, an unknown split, or puts an
            image in two splits (the message gives the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: manifest file not found")
    rows = read_rows(path, ("image", "text", "split"), DataError)
    splits = [_MANIFEST_SPLITS.get(str(row.fields.get("split", "")).strip().lower()) for row in rows]
    for row, split in zip(rows, splits):
        if split is None:
            raise DataError(f"{row.where}: 'split' is {row.fields.get('split')!r}; expected train, val (or validation), test or restval")
    return _grouped(rows, "image", splits)


def read_imagefolder(root: str | Path) -> list[CaptionRecord]:
    """Read a Hugging Face ``imagefolder``: images with a ``metadata.jsonl`` or ``metadata.csv``.

    Each row has ``file_name`` (relative to the metadata file's folder) and ``text``; an image on
    several rows has all those captions as its references. The splits are the sub-folders
    ``train/``, ``validation/`` (or ``valid/``, ``val/``, ``dev/``) and ``test/``, each with its
    metadata file, as ``datasets`` lays them out; a metadata file in ``root`` itself is the
    training split alone (:func:`shared.io.data_files.metadata_files`)::

        root/train/metadata.jsonl          {"file_name": "0001.jpg", "text": "A dog runs."}
        root/train/0001.jpg
        root/validation/metadata.jsonl ...

    Args:
        root (str or Path): the folder.

    Returns:
        list of CaptionRecord: the splits in the order train, val, test; within one, images in
        the order they first appear.

    Raises:
        DataError: no metadata file, or a row lacks ``file_name`` or ``text``, names an image that
            does not exist, or has a caption without words (the message gives the file and line).
    """
    root = Path(root)
    found = metadata_files(root, DataError)
    if not found:
        raise DataError(f"{root}: no imagefolder metadata; expected metadata.jsonl or metadata.csv in {root} or in train/, validation/, test/")
    records = []
    for split in ("train", "validation", "test"):
        if split in found:
            rows = read_rows(found[split], ("file_name", "text"), DataError)
            records += _grouped(rows, "file_name", [_FOLDER_SPLITS[split]] * len(rows))
    return records


def read_captions(data_dir: str | Path, json_file: str | Path | None = None,
                  image_dir: str | Path | None = None) -> tuple[list[CaptionRecord], Path]:
    """Read whatever caption data set ``data_dir`` holds (the rule in the module docstring).

    Args:
        data_dir (str or Path): the data set's folder.
        json_file (str or Path or None): a Karpathy split file, relative to ``data_dir`` unless
            absolute; it is read whatever else the folder holds. (Default: ``None``)
        image_dir (str or Path or None): for a Karpathy split file, the image folder
            (:func:`find_image_dir`). (Default: ``None``)

    Returns:
        tuple: the records (image paths ready to open) and the file or folder they were read from.

    Raises:
        DataError: the folder is missing, holds none of the layouts, or what it holds is malformed.
    """
    data_dir = Path(data_dir)
    if json_file is None:
        if not data_dir.is_dir():
            find_karpathy_file(data_dir)  # its message says how to make the built-in data
        for suffix in MANIFEST_SUFFIXES:
            if (data_dir / f"captions{suffix}").is_file():
                return read_manifest(data_dir / f"captions{suffix}"), data_dir / f"captions{suffix}"
        if metadata_files(data_dir, DataError):
            return read_imagefolder(data_dir), data_dir
        if not any(data_dir.glob("dataset_*.json")):
            raise DataError(
                f"{data_dir}: no caption data set; expected captions.jsonl or captions.csv (a manifest), "
                "metadata.jsonl or metadata.csv (an imagefolder, also in train/, validation/, test/), "
                "or a Karpathy dataset_*.json (or set data.json_file)"
            )
    split_file = data_dir / json_file if json_file is not None else find_karpathy_file(data_dir)
    records = read_karpathy(split_file, ".")
    folder = find_image_dir(data_dir, records, image_dir)
    return [CaptionRecord(folder / r.path, r.split, r.references, r.objects) for r in records], split_file


def find_karpathy_file(data_dir: str | Path) -> Path:
    """The one ``dataset_*.json`` in ``data_dir``."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(
            f"{data_dir}: data folder not found (for the built-in data run `show-attend prepare shapes --out {data_dir}`)"
        )
    found = sorted(data_dir.glob("dataset_*.json"))
    if len(found) != 1:
        what = "no dataset_*.json" if not found else f"{len(found)} dataset_*.json files"
        raise DataError(f"{data_dir}: found {what}; set data.json_file to the Karpathy split file")
    return found[0]


# Image folders as the data sets unpack, searched in this order when data.image_dir is not set.
IMAGE_FOLDERS = ("images", "Images", "Flicker8k_Dataset", "Flickr8k_Dataset", "flickr30k-images", "flickr30k_images", ".")
_PROBE = 20  # records looked up to recognise the image folder


def find_image_dir(data_dir: str | Path, records: list[CaptionRecord], image_dir: str | Path | None = None) -> Path:
    """The folder that holds the images of ``records`` (paths relative to it, as read).

    Args:
        data_dir (str or Path): the data set's folder.
        records (list of CaptionRecord): as :func:`read_karpathy` returns them for ``image_dir="."``.
        image_dir (str or Path or None): the folder the configuration names; relative to
            ``data_dir`` unless absolute. ``None`` tries :data:`IMAGE_FOLDERS` under ``data_dir``.

    Raises:
        DataError: the named folder is missing, or no candidate holds any of the first images.
    """
    data_dir = Path(data_dir)
    probe = [r.path for r in records[:_PROBE]]
    candidates = [data_dir / image_dir] if image_dir is not None else [data_dir / name for name in IMAGE_FOLDERS]
    for folder in candidates:
        if folder.is_dir() and any((folder / path).is_file() for path in probe):
            return folder
    if image_dir is not None and not candidates[0].is_dir():
        raise DataError(f"{candidates[0]}: image folder not found (data.image_dir); expected the folder holding {probe[0].name}")
    looked = ", ".join(str(c) for c in candidates if c.is_dir()) or "no candidate folder exists"
    raise DataError(
        f"{data_dir}: none of the first {len(probe)} images of the split file is there (looked for {probe[0]} in: "
        f"{looked}); set data.image_dir to the folder holding them"
    )
