"""Writing a shard folder whole or not at all, and not again when its inputs have not changed.

:func:`write_shards` is given the app's examples of every split and a ``pack`` function that turns
one into an item (a dict of bytes, strings and numbers); it writes each split with
``litdata.optimize`` and the marker last. A local folder is written under a temporary name beside
its final one and renamed when whole, so a failure (a full disk, an unreadable file) leaves
nothing behind and the line that says why; on object storage the marker is written last, and a
folder without it is refused by readers. The marker holds the fingerprint of the inputs: a
second run with the same inputs finds it and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import queue
import re
import shutil
import signal
import sys
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shared.io.writes import WriteError, replacing

from .layout import FORMAT, MARKER, ShardError, is_url, join, read_file, require_litdata

__all__ = ["fingerprint", "file_state", "up_to_date", "write_shards", "DEFAULT_CHUNK_MB"]

DEFAULT_CHUNK_MB = 64  # LitData's suggestion: large enough for object storage, small enough to spread over ranks
_ERRNO = re.compile(r"\[Errno (\d+)\]")


def fingerprint(parts: Iterable[Any]) -> str:
    """A SHA-256 of JSON-able ``parts`` (settings, then one entry per example: its file, size, time, text)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def file_state(path: str | os.PathLike) -> list:
    """What a fingerprint knows of an input file: its path, size and modification time."""
    stat = os.stat(path)
    return [str(path), stat.st_size, stat.st_mtime_ns]


def up_to_date(out: str, app: str, inputs_fingerprint: str) -> bool:
    """Whether ``out`` holds ``app``'s shards written from inputs with this fingerprint (its marker says so)."""
    existing = read_file(out, MARKER)
    if existing is None:
        return False
    try:
        previous = json.loads(existing.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(previous, dict) and previous.get("fingerprint") == inputs_fingerprint and previous.get("app") == app


class _Counted:
    """``pack`` that also counts the items made, in memory shared with the writing processes.

    Strings are stored as LitData's ``Text``: a plain ``str`` that names an existing file (an
    image's path, a key that happens to be a file name) would be replaced by that file's content,
    which LitData then decodes as audio or an image when it is read.
    """

    def __init__(self, pack: Callable[[Any], dict], counter):
        self.pack, self.counter = pack, counter

    def __call__(self, example: Any) -> dict:
        from litdata.types import Text

        try:
            packed = self.pack(example)
        except Exception as err:  # an input that cannot be read: reported at once (see _optimize_here)
            if _reports is not None:
                _reports.put(_cause(err))
            raise
        item = {key: Text(text=value) if isinstance(value, str) else value for key, value in packed.items()}
        with self.counter.get_lock():
            self.counter.value += 1
        return item


@contextmanager
def _progress(total: int, show: bool, label: str) -> Iterator[Any]:
    """A shared counter, shown as a bar on standard error while the block runs (when ``show``)."""
    counter = multiprocessing.get_context("fork").Value("q", 0)
    stop = threading.Event()
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=total, desc=label, unit="item", file=sys.stderr, leave=False)

        def follow() -> None:
            while not stop.wait(0.2):
                bar.update(counter.value - bar.n)

        watcher = threading.Thread(target=follow, daemon=True)
        watcher.start()
    try:
        yield counter
    finally:
        stop.set()
        if bar is not None:
            watcher.join()
            bar.update(counter.value - bar.n)
            bar.close()


class _WriterFailed(OSError):
    """What stopped ``litdata.optimize``: the ``errno`` (if any) and the last line of its error."""


def _cause(err: BaseException) -> tuple[int | None, str]:
    """``(errno or None, reason)`` of an error of ``litdata.optimize``, which reports a writing
    process's error as a ``RuntimeError`` holding that process's traceback."""
    text = str(err).strip()
    found = _ERRNO.search(text)
    code = int(found.group(1)) if found else getattr(err, "errno", None)
    if code:
        reason = os.strerror(code)
        return code, reason[0].lower() + reason[1:]
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("File ")]
    return None, lines[-1] if lines else type(err).__name__


_reports = None  # in the writing processes: where a failure is reported to the program


def _report_failures(method):
    """``method`` (a LitData writer's), reporting the error that stops it before raising it."""

    def reporting(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except Exception as err:
            _reports.put(_cause(err))
            raise

    return reporting


def _optimize_here(reports, options: dict) -> None:
    """In the forked process: ``litdata.optimize`` at the head of a process group of its own. Its
    writers report a failure at once: LitData itself waits forever for a worker whose last chunk
    could not be written, once every item was counted."""
    global _reports
    os.setpgid(0, 0)
    _reports = reports
    try:
        import litdata
        from litdata.streaming.writer import BinaryWriter

        for name in ("add_item", "done"):  # every chunk and index a worker writes goes through these
            setattr(BinaryWriter, name, _report_failures(getattr(BinaryWriter, name)))
        litdata.optimize(**options)
        reports.put(None)
    except BaseException as err:  # noqa: B036 (reported to the program, whatever it was)
        reports.put(_cause(err))
    finally:
        reports.close()
        reports.join_thread()
        os._exit(0)  # nothing of the program's (its exit handlers, a test runner) runs again in this copy


def _optimize(options: dict) -> None:
    """``litdata.optimize(**options)`` in a process group of its own, ended whole afterwards.

    When one of its writing processes fails, LitData raises (or waits) but leaves processes running
    that keep the program's output open and never end; the group ends them all.

    Raises:
        _WriterFailed: what stopped the writing.
    """
    context = multiprocessing.get_context("fork")  # the counter and the packing function are inherited
    reports = context.Queue()
    process = context.Process(target=_optimize_here, args=(reports, options))
    process.start()
    try:
        while True:
            try:
                outcome = reports.get(timeout=0.2)
                break
            except queue.Empty:
                if not process.is_alive() and reports.empty():
                    outcome = (None, f"the writing process ended with code {process.exitcode}")
                    break
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # what is left of the group: nothing when all went well
        except ProcessLookupError:
            pass
        process.join()
    if outcome is not None:
        code, reason = outcome
        raise _WriterFailed(code, reason)


@contextmanager
def _scratch(folder: str) -> Iterator[None]:
    """LitData's working folders (chunks on their way to object storage, its cache) inside ``folder``,
    instead of empty ``chunks/`` and ``data/`` folders left in the system's temporary folder."""
    saved = {name: os.environ.get(name) for name in ("DATA_OPTIMIZER_CACHE_FOLDER", "DATA_OPTIMIZER_DATA_CACHE_FOLDER")}
    os.environ["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(folder, "chunks")
    os.environ["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(folder, "data")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _failure(err: BaseException, out: str, kept: str) -> OSError:
    """One line for a failed write: what, where, why, and what is left."""
    if isinstance(err, WriteError):
        return err
    code, reason = (err.errno, err.strerror) if isinstance(err, _WriterFailed) else _cause(err)
    return WriteError(f"could not write the shards {out}: {reason} ({kept})", code)


def write_shards(
    out: str,
    app: str,
    splits: dict[str, list],
    pack: Callable[[Any], dict],
    marker: dict,
    inputs_fingerprint: str,
    chunk_mb: float = DEFAULT_CHUNK_MB,
    workers: int = 1,
    progress: bool = True,
    overwrite: bool = False,
) -> bool:
    """Write ``splits`` as LitData chunks into ``out``, then the marker.

    Args:
        out (str): a local folder or an object-store URL.
        app (str): the program writing (``"speech-attend"``); readers of the other app refuse the folder.
        splits (dict): split name -> examples, in the order they are written (the training split
            already shuffled). Each example is given to ``pack``; with ``workers > 1`` it is sent to
            another process.
        pack (callable): example -> item: a flat dict of ``bytes``, ``str``, ``int`` and ``float``,
            the same keys and types for every example.
        marker (dict): the app's part of the marker (``settings``, ``vocabulary`` and per split its
            own fields); ``items``, ``chunks`` and ``bytes`` of each split are added here.
        inputs_fingerprint (str): :func:`fingerprint` of everything the shards are made from.
        chunk_mb (float, optional): target chunk size in megabytes. (Default: ``64``)
        workers (int, optional): writing processes. (Default: ``1``)
        progress (bool, optional): a progress bar on standard error. (Default: ``True``)
        overwrite (bool, optional): replace a shard folder written from other inputs. (Default: ``False``)

    Returns:
        bool: ``True`` when the shards were written, ``False`` when ``out`` already held them.

    Raises:
        ShardError: ``out`` holds something else, or shards of other inputs without ``overwrite``.
        WriteError: a chunk or the marker could not be written (a full disk); a local ``out`` is left as it was.
    """
    if chunk_mb <= 0 or workers < 1:
        raise ValueError(f"the chunk size must be positive and the writers at least 1, got {chunk_mb} MB and {workers}")
    empty = [name for name, examples in splits.items() if not examples]
    if not splits or empty:
        raise ShardError(f"{out}: nothing to write for {', '.join(empty) or 'any split'}; expected examples in every split")
    if up_to_date(out, app, inputs_fingerprint):
        return False
    if read_file(out, MARKER) is not None:
        if not overwrite:
            raise ShardError(
                f"{out}: holds shards written from other inputs or settings; expected a new folder "
                "(or give --overwrite to replace them)"
            )
    elif not is_url(out) and Path(out).exists() and (not Path(out).is_dir() or any(Path(out).iterdir())):
        if not overwrite:
            raise ShardError(f"{out}: exists and is not a shard folder; expected a new or empty folder (or --overwrite)")
    marker = {
        **marker,
        "app": app,
        "format": FORMAT,
        "fingerprint": inputs_fingerprint,
        "splits": {name: dict(marker.get("splits", {}).get(name, {})) for name in splits},
    }
    if is_url(out):
        _write_remote(out, splits, pack, marker, chunk_mb, workers, progress)
    else:
        _write_local(Path(out), splits, pack, marker, chunk_mb, workers, progress)
    return True


def _write_splits(
    target: str, splits: dict[str, list], pack, marker: dict, chunk_mb: float, workers: int, progress: bool, scratch: str
) -> None:
    """Each split into ``target/<split>``, its counts into ``marker``."""
    require_litdata()
    for name, examples in splits.items():
        folder = join(target, name)
        with _progress(len(examples), progress, f"shards {name}") as counter, _scratch(scratch):
            with warnings.catch_warnings():  # the writing processes are forked inside and keep this filter
                warnings.filterwarnings("ignore", message="An item was larger than the target chunk size")  # a big file, a chunk
                _optimize(
                    dict(
                        fn=_Counted(pack, counter),
                        inputs=examples,
                        output_dir=folder,
                        chunk_bytes=int(chunk_mb * 1e6),
                        num_workers=min(workers, len(examples)),
                        keep_data_ordered=True,  # the items keep the order they are given in (the marker's lengths follow it)
                        reorder_files=False,
                        start_method="fork",
                        verbose=False,
                    )
                )
        chunks = json.loads((read_file(folder, "index.json") or b"{}").decode("utf-8")).get("chunks", [])
        written = {
            "items": sum(int(c["chunk_size"]) for c in chunks),
            "chunks": len(chunks),
            "bytes": sum(int(c["chunk_bytes"]) for c in chunks),
        }
        if written["items"] != len(examples):
            raise ShardError(f"{folder}: {written['items']} items were written of {len(examples)}")
        marker["splits"][name].update(written)


def _write_local(out: Path, splits, pack, marker: dict, chunk_mb: float, workers: int, progress: bool) -> None:
    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        _write_splits(str(partial), splits, pack, marker, chunk_mb, workers, progress, str(partial / ".scratch"))
        shutil.rmtree(partial / ".scratch", ignore_errors=True)
        with replacing(partial / MARKER, "the shards' marker") as temporary:
            temporary.write_text(json.dumps(marker, ensure_ascii=False, indent=1), encoding="utf-8")
        if out.exists():  # --overwrite: the old folder goes only once the new one is whole
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out, old)
            os.replace(partial, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(partial, out)
    except BaseException as err:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(err, (ShardError, KeyboardInterrupt)) or not isinstance(err, Exception):
            raise
        kept = f"{out} is left as it was" if out.exists() else "nothing was kept"
        raise _failure(err, str(out), kept) from err


def _write_remote(out: str, splits, pack, marker: dict, chunk_mb: float, workers: int, progress: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="attend-shards-") as scratch:
        try:
            _write_splits(out, splits, pack, marker, chunk_mb, workers, progress, scratch)
            local = Path(scratch, MARKER)
            local.write_text(json.dumps(marker, ensure_ascii=False, indent=1), encoding="utf-8")
            from litdata.streaming.fs_provider import _get_fs_provider  # LitData's clients for s3, gs, r2

            _get_fs_provider(join(out, MARKER)).upload_file(str(local), join(out, MARKER))
        except ShardError:
            raise
        except Exception as err:
            raise _failure(err, out, f"no {MARKER} was written, so readers refuse the folder") from err
