"""Reading caption data sets: Karpathy split files -> :class:`CaptionRecord`, and finding their image folder.

One reader serves every data set the captioner knows, because they all come as a Karpathy
split file (``dataset_coco.json``, ``dataset_flickr8k.json``, ``dataset_flickr30k.json``, or the
built-in ``dataset_shapes.json`` from :mod:`show_attend.builtin.shapes`)::

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


__all__ = ["DataError", "CaptionRecord", "read_karpathy", "find_karpathy_file", "find_image_dir"]


_SPLITS = {"train": "train", "restval": "train", "val": "val", "test": "test"}  # restval folds into train
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


def _tokens(sentence: dict) -> list[str]:
    tokens = sentence.get("tokens")
    if isinstance(tokens, list) and tokens:
        return [str(t).lower() for t in tokens]
    return _WORD.findall(str(sentence.get("raw", "")).lower())


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
