"""How the programs write their files: whole or not at all, and a failure said in one line.

A checkpoint, an export, a run's metrics, test results and the pictures of ``caption``,
``transcribe`` and ``explain`` can all meet a full disk, a quota, a read-only or vanished file
system. Each write goes through :func:`replacing` (a new file beside the target, synced, renamed
over it, so the previous version survives a failure) or :func:`writing` (a write in place, e.g.
an append), and a failure becomes a :class:`WriteError`: what could not be written, where, and
why, e.g.::

    could not write the checkpoint runs/version_0/checkpoints/last.ckpt: no space left on device (the previous last.ckpt is kept)

It is an ``OSError``, so :func:`shared.io.commands.run_app` prints it as one line and
exits with 2. ``torch.save`` reports a failed write as a ``RuntimeError`` ("[enforce fail at
inline_container.cc:672] . unexpected pos ...") and safetensors as its own error ("... (os error
28)"); the cause is read from the error chain, and failing that from the file system's free
space. No torch is imported here.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["WriteError", "replacing", "write_error", "writing"]

_NEARLY_FULL_BYTES = 1 << 20  # a write that failed with less than this left found the disk full
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how Rust libraries (safetensors) name an errno
_UMASK = os.umask(0)
os.umask(_UMASK)  # read, then put back: os.umask only reads by setting


class WriteError(OSError):
    """A file that could not be written; the message says what, where and why in one line.

    Args:
        message (str): the whole line.
        code (int or None, optional): the ``errno`` of the cause, e.g. ``errno.ENOSPC``. (Default: ``None``)
    """

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.errno = code


def _causes(err: BaseException) -> Iterator[BaseException]:
    """``err``, then what it was raised from or during, and so on."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def _free_bytes(folder: Path) -> int | None:
    """Bytes an ordinary user may still write on ``folder``'s file system (``None``: unknown)."""
    for candidate in (folder, *folder.parents):
        try:
            stats = os.statvfs(candidate)
        except (OSError, AttributeError):  # not there (yet), or no statvfs on this system
            continue
        return stats.f_bavail * stats.f_frsize
    return None


def _reason(err: BaseException, folder: Path) -> tuple[int | None, str]:
    """Why a write into ``folder`` failed: ``(errno or None, the reason in words)``."""
    for cause in _causes(err):
        code = cause.errno if isinstance(cause, OSError) else None
        found = None if code else _RUST_OS_ERROR.search(str(cause))
        code = code or (int(found.group(1)) if found else None)
        if code:
            text = os.strerror(code)
            return code, text[0].lower() + text[1:]
    free = _free_bytes(folder)
    if free is not None and free < _NEARLY_FULL_BYTES:  # torch.save's "unexpected pos" on a full disk
        return errno.ENOSPC, "no space left on device"
    text = str(err).strip()
    return None, text.splitlines()[0] if text else type(err).__name__


def write_error(what: str, path: str | Path, err: BaseException, note: str = "") -> WriteError | None:
    """The :class:`WriteError` for ``err``, raised while writing ``what`` to ``path``, or ``None``
    when ``err`` is no failure to write (a bug's ``TypeError``, a ``KeyboardInterrupt``).

    Args:
        what (str): what the file is, for the message ("the checkpoint", "the run's metrics").
        path (str or Path): the file.
        err (BaseException): what the write raised.
        note (str, optional): added to the message in brackets. (Default: ``""``)
    """
    if isinstance(err, WriteError):
        return err
    if not isinstance(err, Exception):
        return None
    code, reason = _reason(err, Path(path).parent)
    if code is None and not isinstance(err, (OSError, RuntimeError)):
        return None
    return WriteError(f"could not write {what} {path}: {reason}" + (f" ({note})" if note else ""), code)


@contextmanager
def writing(what: str, path: str | Path) -> Iterator[None]:
    """Turn a failure to write ``path`` inside the block into a :class:`WriteError` naming it.

    Args:
        what (str): what the file is, for the message ("the run's metrics").
        path (str or Path): the file the block writes.
    """
    try:
        yield
    except BaseException as err:
        failure = write_error(what, path, err)
        if failure is None or failure is err:
            raise
        raise failure from err


@contextmanager
def replacing(path: str | Path, what: str) -> Iterator[Path]:
    """Write ``path`` whole or not at all: the block writes the yielded temporary file.

    The temporary file is hidden (``.<name>.<random>.tmp``) in ``path``'s folder, so the final
    ``os.replace`` is a rename on one file system, atomic; it is synced first, so the name never
    points at data still in memory. When the block or the rename fails, the temporary file is
    removed, ``path`` keeps its previous content, and the error is a :class:`WriteError`.

    Args:
        path (str or Path): the file to write (its folder is created if needed).
        what (str): what the file is, for the message ("the checkpoint").
    """
    path = Path(path)
    with writing(what, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(descriptor)
    temporary = Path(name)
    try:
        yield temporary
        # the permissions of a plain open(): not mkstemp's 0600, nor a writer's own (safetensors' 0600)
        os.chmod(temporary, 0o666 & ~_UMASK)
        descriptor = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
    except BaseException as err:
        note = f"the previous {path.name} is kept" if path.exists() else ""
        failure = write_error(what, path, err, note)  # before the removal frees the space it measures
        temporary.unlink(missing_ok=True)
        if failure is None or failure is err:
            raise
        raise failure from err
