"""The command-line frame both apps share: sub-commands, one-line errors, exit codes.

``run_app`` dispatches ``fit|validate|test`` to the app's LightningCLI and every other
sub-command (``prepare``, ``caption``, ``transcribe``, ``export``, ...) to the app's own
handler. Any error a user can cause (a ``ValueError`` or ``OSError``, which covers the apps'
own error classes) is printed as one line, ``PROG: error: ...``, with exit code 2; ``--debug``
anywhere on the command line shows the full traceback instead. A file that could not be written
(a full disk) is a :class:`~shared.io.writes.WriteError`, an ``OSError`` whose line says
what, where and why (see :mod:`shared.io.writes`). Output into a closed pipe
(``transcribe ... | head``) ends the program quietly, as Unix tools do.

No Lightning is imported here: only the training commands load it.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["run_app", "expand_folders", "one_line", "LIGHTNING_COMMANDS"]

LIGHTNING_COMMANDS = ("fit", "validate", "test")
_BROKEN_PIPE_EXIT_CODE = 128 + int(signal.SIGPIPE)  # what a shell reports for `cmd | head`'s cmd


def _usage(prog: str, commands: dict[str, Callable]) -> str:
    names = " | ".join([*LIGHTNING_COMMANDS, *commands])
    return f"usage: {prog} {{{names}}} [options]   ('{prog} COMMAND --help' for a command's options)"


def one_line(err: BaseException) -> str:
    """The first line of an error; an OS error as ``path: what`` ("/x/out: file exists"), not
    Python's ``[Errno 17] File exists: '/x/out'``."""
    if isinstance(err, OSError) and err.strerror:
        reason = f"{err.strerror[0].lower()}{err.strerror[1:]}"
        return f"{err.filename}: {reason}" if err.filename else reason
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


def _check_config_files(args: list[str]) -> None:
    """A ``--config`` file that is not there is one line here, not jsonargparse's page of usage."""
    for i, arg in enumerate(args):
        path = (
            args[i + 1]
            if arg == "--config" and i + 1 < len(args)
            else arg.removeprefix("--config=")
            if arg.startswith("--config=")
            else None
        )
        if path is not None and not Path(path).is_file():
            raise FileNotFoundError(f"{path}: config file not found (--config expects a YAML file such as those in configs/)")


def _quiet_broken_pipe() -> int:
    """The reader of our output went away: say nothing more, as ``cat file | head`` does."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
    except (OSError, ValueError):
        pass
    return _BROKEN_PIPE_EXIT_CODE


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
        lightning (callable): runs the app's LightningCLI on ``[command, *args]``.
        argv (list of str or None): arguments; ``sys.argv[1:]`` when ``None``.

    Returns:
        int: process exit code (0 success, 2 user error, 130 interrupted, 141 closed pipe).
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
        lightning([command, *rest])
        return 0
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError) as err:
        if debug:
            traceback.print_exc()
        print(f"{prog}: error: {one_line(err)}", file=sys.stderr)
        return 2
