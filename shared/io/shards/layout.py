"""A shard folder's layout, its marker, and the checks made before any training starts.

:func:`open_shards` reads the marker (``attend.json``) and refuses, in one line that names the
folder or file and says what was expected: a folder without a marker (never written, or its
writing did not finish), one written by the other app or a newer format, a split the marker
does not list, and a split whose LitData index or chunks do not match what the marker recorded
(a missing chunk, one cut short, one whose header is not the chunk the index names). Chunks
are checked by their size and header only, so the check costs a few bytes a chunk; a chunk whose
bytes were changed in place is found item by item, and those items are skipped and logged like
unreadable files.

On object storage only the marker and each split's index are read before training; the chunks
are LitData's to fetch.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MARKER",
    "FORMAT",
    "UNREADABLE",
    "ShardError",
    "Shards",
    "open_shards",
    "is_url",
    "join",
    "read_file",
    "check_vocabulary",
    "require_litdata",
]

MARKER = "attend.json"
INDEX = "index.json"  # LitData's, one per split
FORMAT = 1  # the layout version this code writes and reads
_APPS = {"show-attend": "image captions", "speech-attend": "speech"}
UNREADABLE = "unreadable"  # the key of an item LitData could not read back: {"unreadable": reason, "where": ...}


class ShardError(ValueError):
    """A shard folder that cannot be used; the message names it and says what was expected."""


def require_litdata() -> None:
    """Shards are written and read by LitData, an optional dependency: say so in one line when it is missing."""
    try:
        import litdata  # noqa: F401
    except ImportError:
        raise ShardError("shards are written and read by LitData, which is not installed: pip install 'attend[shards]'") from None


def is_url(location: str) -> bool:
    """Whether ``location`` is an object-store URL (``s3://...``, ``gs://...``) rather than a local path."""
    return "://" in str(location)


def join(location: str, *parts: str) -> str:
    """``location/part/...`` for a local path or a URL."""
    if is_url(location):
        return "/".join([str(location).rstrip("/"), *parts])
    return str(Path(location, *parts))


def read_file(location: str, name: str) -> bytes | None:
    """The bytes of ``location/name``, or ``None`` when there is no such file."""
    path = join(location, name)
    if not is_url(location):
        try:
            return Path(path).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
    require_litdata()
    from litdata.streaming.fs_provider import _get_fs_provider  # LitData's clients for s3, gs, r2

    provider = _get_fs_provider(path)
    if not provider.exists(path):
        return None
    with tempfile.TemporaryDirectory() as scratch:
        local = os.path.join(scratch, os.path.basename(name))
        provider.download_file(path, local)
        return Path(local).read_bytes()


def _listed(tokens: Sequence[str], most: int = 8) -> str:
    shown = ", ".join(repr(t) for t in tokens[:most])
    return shown + (f" and {len(tokens) - most} more" if len(tokens) > most else "")


@dataclass(frozen=True)
class Shards:
    """A checked shard folder: where it is and what its marker says.

    Args:
        location (str): the folder or URL.
        marker (dict): the parsed ``attend.json``.
    """

    location: str
    marker: dict

    @property
    def app(self) -> str:
        return self.marker["app"]

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the inputs the folder was written from."""
        return self.marker["fingerprint"]

    @property
    def settings(self) -> dict[str, Any]:
        """What the writer was told beyond the inputs (the text normalisation, the chunk size, ...)."""
        return self.marker.get("settings", {})

    @property
    def vocabulary(self) -> dict[str, int]:
        """Each token (character or word) of the training text and how often it occurs."""
        return self.marker["vocabulary"]["counts"]

    @property
    def splits(self) -> dict[str, dict]:
        return self.marker["splits"]

    def split(self, name: str) -> dict:
        """What the marker says of split ``name``: ``items``, ``chunks``, ``bytes`` and the app's own fields."""
        if name not in self.splits:
            raise ShardError(
                f"{self.location}: no {name!r} split; the shards hold {', '.join(map(repr, self.splits)) or 'none'} "
                f"(expected the split the data settings name)"
            )
        return self.splits[name]

    def split_location(self, name: str) -> str:
        """The folder (or URL) of split ``name``'s index and chunks."""
        self.split(name)
        return join(self.location, name)


def open_shards(location: str | os.PathLike, app: str, check_chunks: bool = True) -> Shards:
    """Read and check the shard folder at ``location`` for ``app``.

    Args:
        location (str or PathLike): a folder or an object-store URL.
        app (str): the program that reads it (``"speech-attend"``, ``"show-attend"``).
        check_chunks (bool, optional): check every split's index and, for a local folder, every
            chunk's size and header. (Default: ``True``)

    Raises:
        ShardError: the folder or its marker is missing or unreadable, it was written by the
            other app or a newer format, or a split's index or chunks are not what the marker says.
    """
    location = str(location)
    how = f"`{app} prepare shards --data DIR --out {location}`"
    if not is_url(location) and not Path(location).is_dir():
        raise ShardError(f"{location}: shard folder not found; expected a folder written by {how}")
    raw = read_file(location, MARKER)
    if raw is None:
        raise ShardError(
            f"{location}: no {MARKER}; expected a shard folder written by {how} (a writing that did not finish leaves none)"
        )
    try:
        marker = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ShardError(f"{join(location, MARKER)}: not valid JSON ({err}); expected the marker written by {how}") from None
    if not isinstance(marker, dict) or not {"app", "format", "fingerprint", "splits", "vocabulary"} <= marker.keys():
        raise ShardError(f"{join(location, MARKER)}: not a shard marker; expected the one written by {how}")
    if marker["format"] > FORMAT:
        raise ShardError(
            f"{location}: shards of format {marker['format']}, written by a newer version; expected format {FORMAT} or older"
        )
    if marker["app"] != app:
        what = _APPS.get(marker["app"], "another program")
        raise ShardError(
            f"{location}: shards written by {marker['app']} ({what}); expected {app} shards ({_APPS.get(app, app)}), "
            f"written by {how}"
        )
    shards = Shards(location, marker)
    if check_chunks:
        for name in shards.splits:
            _check_split(shards, name)
    return shards


def _check_split(shards: Shards, name: str) -> None:
    """The split's LitData index lists the items and chunks the marker recorded, and each local chunk is whole."""
    info, folder = shards.split(name), shards.split_location(name)
    raw = read_file(folder, INDEX)
    where = join(folder, INDEX)
    if raw is None:
        raise ShardError(f"{where}: missing; expected LitData's index of the {name} split's {info['chunks']} chunks")
    try:
        chunks = json.loads(raw.decode("utf-8"))["chunks"]
        items = sum(int(c["chunk_size"]) for c in chunks)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise ShardError(f"{where}: not a LitData index ({err}); expected the index written with the {name} split") from None
    if (len(chunks), items) != (info["chunks"], info["items"]):
        raise ShardError(
            f"{where}: lists {items} items in {len(chunks)} chunks; expected {info['items']} items in {info['chunks']} "
            f"chunks, as {MARKER} says (the split was replaced after the marker was written)"
        )
    if is_url(folder):
        return
    for chunk in chunks:
        _check_chunk(Path(folder, chunk["filename"]), int(chunk["chunk_bytes"]), int(chunk["chunk_size"]))


def _check_chunk(path: Path, size: int, items: int) -> None:
    """A LitData chunk is ``[items: u32][offsets: u32 x (items + 1)][data]``; the last offset is its size."""
    expected = f"a chunk of {size} bytes holding {items} items"
    try:
        actual = path.stat().st_size
        with path.open("rb") as f:
            header = f.read(4 * (items + 2))
    except FileNotFoundError:
        raise ShardError(f"{path}: missing; expected {expected}") from None
    except OSError as err:
        raise ShardError(f"{path}: cannot be read ({err.strerror or err}); expected {expected}") from None
    if actual != size:
        raise ShardError(f"{path}: {actual} bytes; expected {expected} (cut short or replaced)")
    count = struct.unpack("<I", header[:4])[0] if len(header) >= 4 else -1
    offsets = struct.unpack(f"<{items + 1}I", header[4:]) if len(header) == 4 * (items + 2) else ()
    whole = count == items and offsets and offsets[0] == 4 * (items + 2) and offsets[-1] == size
    if not whole or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise ShardError(f"{path}: its header does not describe {items} items in {size} bytes; expected {expected} (corrupt)")


def check_vocabulary(shards: Shards, tokens: Iterable[str], model_tokens: Sequence[str], kind: str) -> None:
    """Refuse shards whose training text (``tokens``: what the app keeps of it) holds ``kind``
    (characters, words) that a model's vocabulary ``model_tokens`` lacks.

    Raises:
        ShardError: naming the folder and the first missing tokens.
    """
    known = set(model_tokens)
    missing = sorted({t for t in tokens if t not in known})
    if missing:
        raise ShardError(
            f"{shards.location}: its training text has {len(missing)} {kind} that the model's vocabulary lacks "
            f"({_listed(missing)}); expected shards written from text of the model's vocabulary"
        )
