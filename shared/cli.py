"""The command-line frame both apps share: sub-commands, LightningCLI, one-line errors.

``run_app`` dispatches ``fit|validate|test`` to LightningCLI and every other sub-command to
the app's own handler. Any error a user can cause (a ``ValueError`` or ``OSError``, which
covers the apps' own error classes) is printed as one line, ``error: ...``, with exit code 2;
``--debug`` anywhere on the command line shows the full traceback instead.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Callable, Sequence

import torch.distributed as dist
from pytorch_lightning.cli import LightningCLI

from .checkpoint import CheckpointError, safe_torch_load

__all__ = ["run_app", "LIGHTNING_COMMANDS", "SafeCheckpointCLI", "expand_folders"]

LIGHTNING_COMMANDS = ("fit", "validate", "test")


def _usage(prog: str, commands: dict[str, Callable]) -> str:
    names = " | ".join([*LIGHTNING_COMMANDS, *commands])
    return f"usage: {prog} {{{names}}} [options]   ('{prog} COMMAND --help' for a command's options)"


class SafeCheckpointCLI(LightningCLI):
    """LightningCLI whose ``--ckpt_path`` is checked before Lightning reads it.

    LightningCLI reads the checkpoint's hyper-parameters with a bare ``torch.load`` before any
    app code runs, so a missing, empty or foreign file would end in a traceback. Here it is a
    one-line :class:`~shared.checkpoint.CheckpointError` that names the file instead.
    """

    def _parse_ckpt_path(self) -> None:
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if ckpt_path and ckpt_path not in ("last", "best", "hpc", "registry"):  # Lightning's named checkpoints
            if not Path(ckpt_path).is_file():
                raise CheckpointError(f"{ckpt_path}: checkpoint not found (--ckpt_path expects a .ckpt file written by fit)")
            safe_torch_load(ckpt_path)  # one extra read; refuses pickled code and names a corrupt file
        super()._parse_ckpt_path()


def _check_config_files(args: list[str]) -> None:
    """A ``--config`` file that is not there is one line here, not jsonargparse's page of usage."""
    for i, arg in enumerate(args):
        path = args[i + 1] if arg == "--config" and i + 1 < len(args) else arg.removeprefix("--config=") if arg.startswith("--config=") else None
        if path is not None and not Path(path).is_file():
            raise FileNotFoundError(f"{path}: config file not found (--config expects a YAML file such as those in configs/)")


def _no_lightning_adverts(record: logging.LogRecord) -> bool:
    # Lightning 2.6 prints a tip for its cloud logger on every fit; not a message for our users.
    return "litlogger" not in record.getMessage()


def _one_line(err: BaseException) -> str:
    """The first line of an error; an OS error as ``path: what`` ("/x/out: file exists"), not
    Python's ``[Errno 17] File exists: '/x/out'``."""
    if isinstance(err, OSError) and err.filename and err.strerror:
        return f"{err.filename}: {err.strerror[0].lower()}{err.strerror[1:]}"
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def expand_folders(paths: Sequence[str], suffixes: Sequence[str], kind: str) -> tuple[list[str], list[str]]:
    """Input paths with every folder replaced by the files under it whose suffix is in ``suffixes``
    (any case, sorted, at any depth), and one error message per folder holding none.

    Args:
        paths (list of str): files and folders, as given on the command line.
        suffixes (list of str): e.g. ``(".wav", ".flac")``.
        kind (str): what the files are, for the message (``"image"``, ``"audio"``).
    """
    files, errors = [], []
    for path in paths:
        if not Path(path).is_dir():
            files.append(path)
            continue
        found = sorted(str(p) for p in Path(path).rglob("*") if p.suffix.lower() in suffixes and p.is_file())
        files.extend(found)
        if not found:
            errors.append(f"{path}: a folder with no {kind} files ({', '.join(suffixes)})")
    return files, errors


def _end_distributed() -> None:
    """Shut down the process group a DDP run left open. Left to the interpreter's exit, gloo's
    worker threads are destroyed while still running, and the process aborts ("terminate called
    without an active exception", exit -6) after its work is done: 4 of 22 two-rank `test` runs did
    before this, 0 of 24 since."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def run_app(
    prog: str,
    commands: dict[str, Callable[[list[str]], int | None]],
    lightning: Callable[[list[str]], object],
    argv: Sequence[str] | None = None,
) -> int:
    """Run one sub-command and turn user errors into one-line messages.

    Args:
        prog (str): program name for messages.
        commands (dict): sub-command name -> handler taking the remaining arguments.
        lightning (callable): runs LightningCLI on ``[command, *args]``.
        argv (list of str or None): arguments; ``sys.argv[1:]`` when ``None``.

    Returns:
        int: process exit code (0 success, 2 user error, 130 interrupted).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("ATTEND_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    if not args or args[0] in ("-h", "--help"):
        print(_usage(prog, commands))
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in commands and command not in LIGHTNING_COMMANDS:
        print(f"{prog}: error: unknown command {command!r}\n{_usage(prog, commands)}", file=sys.stderr)
        return 2
    try:
        if command in commands:
            return int(commands[command](rest) or 0)
        _check_config_files(rest)
        logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_no_lightning_adverts)
        try:
            lightning([command, *rest])
        finally:  # also after SIGTERM's exit 143 and after errors
            _end_distributed()
        return 0
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError) as err:
        if debug:
            traceback.print_exc()
        print(f"{prog}: error: {_one_line(err)}", file=sys.stderr)
        return 2
