"""The plain files people make for their own data, read the same way by both apps.

Two layouts, beside each field's own (Karpathy split files; LibriSpeech, Common Voice):

* a **manifest**: JSON Lines (one object a line), CSV or TSV (a header row naming the columns,
  in any order), one row per example;
* a **Hugging Face folder** (``imagefolder``, ``audiofolder`` in ``datasets``): the media files
  with a ``metadata.jsonl`` or ``metadata.csv`` whose ``file_name`` column names a file relative
  to the metadata's folder; the splits are sub-folders ``train/``, ``validation/`` (or ``valid/``,
  ``val/``, ``dev/``) and ``test/``, each with its metadata file, or one metadata file in the
  folder itself holds the training split alone.

Every row comes with where it is (``file:line``), so an app's error names the line to fix. The
apps turn rows into their records (:mod:`show_attend.data.readers`, :mod:`speech_attend.data.readers`).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Row", "read_rows", "MANIFEST_SUFFIXES", "METADATA_FILES", "SPLIT_FOLDERS", "split_of_folder", "metadata_files"]

MANIFEST_SUFFIXES = (".jsonl", ".csv", ".tsv")
METADATA_FILES = ("metadata.jsonl", "metadata.csv")
# Split folder names as Hugging Face datasets recognises them, by the split each one is.
SPLIT_FOLDERS = {"train": ("train",), "validation": ("validation", "valid", "val", "dev"), "test": ("test",)}


@dataclass(frozen=True)
class Row:
    """One row of a manifest or metadata file.

    Args:
        path (Path): the file the row is in.
        line (int): its line (the first line of a CSV row spread over several).
        fields (dict): column -> value (strings in CSV/TSV; any JSON value in JSON Lines).
    """

    path: Path
    line: int
    fields: dict

    @property
    def where(self) -> str:
        """``file:line``, how every error about the row begins."""
        return f"{self.path}:{self.line}"

    def text(self, name: str, error: type[Exception] = ValueError) -> str:
        """The field ``name`` stripped; raises ``error`` naming the line when it is missing or empty."""
        value = self.fields.get(name)
        if not isinstance(value, str) or not value.strip():
            raise error(f"{self.where}: expected a non-empty {name!r}, got {value!r}")
        return value.strip()

    def file(self, name: str, what: str, error: type[Exception] = ValueError) -> Path:
        """The file the field ``name`` names, relative to the row's file unless absolute; raises
        ``error`` naming the line when the field is empty or the file does not exist."""
        value = self.fields.get(name)
        if not isinstance(value, str) or not value.strip():
            raise error(f"{self.where}: expected a non-empty {name!r} path, got {value!r}")
        path = Path(value.strip())
        if not path.is_absolute():
            path = self.path.parent / path
        if not path.is_file():
            raise error(f"{self.where}: {what} file {value!r} not found at {path}")
        return path


def _csv_field_limit() -> None:
    # A long text column must not crash the reader with csv's unrelated 128 KiB field error.
    csv.field_size_limit(16 * 1024 * 1024)


def _jsonl_rows(path: Path, columns: Sequence[str], error: type[Exception]) -> list[Row]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise error(f"{path}:{lineno}: expected a JSON object with {' and '.join(map(repr, columns))}")
            rows.append(Row(path, lineno, record))
    return rows


def _table_rows(path: Path, delimiter: str, columns: Sequence[str], error: type[Exception]) -> list[Row]:
    _csv_field_limit()
    out = []
    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter=delimiter)
        header = next(rows, None)
        if header is None:
            raise error(f"{path}: file is empty; expected a header row with {' and '.join(map(repr, columns))}")
        header = [h.strip().lstrip("\ufeff") for h in header]  # a spreadsheet's byte-order mark is no part of the name
        missing = [c for c in columns if c not in header]
        if missing:
            raise error(f"{path}:1: header lacks column(s) {missing}; found {header}")
        start = rows.line_num + 1
        for row in rows:
            lineno, start = start, rows.line_num + 1  # a row's first physical line, right after quoted newlines
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise error(f"{path}:{lineno}: expected {len(header)} fields, got {len(row)}")
            out.append(Row(path, lineno, dict(zip(header, row))))
    return out


def read_rows(path: str | os.PathLike, columns: Sequence[str], error: type[Exception] = ValueError) -> list[Row]:
    """The rows of a JSON Lines, CSV or TSV file (by its suffix), blank lines skipped.

    Args:
        path (str or PathLike): a ``.jsonl``, ``.csv`` or ``.tsv`` file.
        columns (sequence of str): the columns every row needs; a CSV/TSV header must name them
            (a JSON row's fields are checked by the caller, with the line).
        error (type): the exception raised, with a message that names the file and line.
            (Default: ``ValueError``)

    Returns:
        list of Row: in file order.

    Raises:
        error: the file is missing, empty, has an unknown suffix, a line is not a JSON object,
            the header lacks a column, or a row has the wrong number of fields.
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = _jsonl_rows(path, columns, error)
    elif suffix in (".csv", ".tsv"):
        rows = _table_rows(path, "," if suffix == ".csv" else "\t", columns, error)
    else:
        raise error(f"{path}: unknown file type; expected one of {MANIFEST_SUFFIXES}")
    if not rows:
        raise error(f"{path}: no rows")
    return rows


def split_of_folder(name: str) -> str | None:
    """The split (``train``, ``validation``, ``test``) a Hugging Face split folder ``name`` is, or ``None``."""
    for split, names in SPLIT_FOLDERS.items():
        if name.lower() in names:
            return split
    return None


def metadata_files(root: str | os.PathLike, error: type[Exception] = ValueError) -> dict[str, Path]:
    """The metadata file of each split of a Hugging Face folder: split -> ``metadata.jsonl`` or ``.csv``.

    Split sub-folders come first; without any, a metadata file in ``root`` itself is the
    training split. Empty when ``root`` is no such folder.

    Raises:
        error: a folder holds both ``metadata.jsonl`` and ``metadata.csv``, or two folders
            are the same split (``val/`` and ``validation/``).
    """
    root = Path(root)

    def metadata(folder: Path) -> Path | None:
        found = [folder / name for name in METADATA_FILES if (folder / name).is_file()]
        if len(found) > 1:
            raise error(f"{folder}: holds both {found[0].name} and {found[1].name}; expected one metadata file")
        return found[0] if found else None

    splits: dict[str, Path] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        split, found = split_of_folder(folder.name), metadata(folder)
        if split is None or found is None:
            continue
        if split in splits:
            raise error(f"{root}: {splits[split].parent.name}/ and {folder.name}/ are both the {split} split; expected one")
        splits[split] = found
    if not splits and root.is_dir() and (found := metadata(root)) is not None:
        splits["train"] = found
    return splits
