"""Where the commands' output files go and what they are called: one rule for both apps.

``caption --overlay-dir``/``--html``, ``transcribe --output-dir``/``--alignment-dir`` and both
``explain --out`` write into a folder the user names, one file per input:

* :func:`writable_folder` makes the folder (and its parents) and checks that a file can be
  written in it, before any model loads or anything is decoded, so a mistyped or read-only
  folder costs one line, not a run;
* :func:`output_names` gives each input its file name (without suffix): the input's stem, and
  where two inputs share a stem, the folders that tell them apart (``a/talk.wav`` and
  ``b/talk.wav`` become ``a_talk`` and ``b_talk``), so no output overwrites another.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

__all__ = ["writable_folder", "output_names"]


def writable_folder(path: str | os.PathLike, option: str) -> Path:
    """Make the output folder ``path`` (and its parents) and check that a file can be written in it.

    Args:
        path (str or PathLike): the folder.
        option (str): the command-line option that named it (``--output-dir``), for the error.

    Returns:
        Path: the folder.

    Raises:
        ValueError: one line naming ``option``, the folder and why it cannot be written.
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):  # removed when closed, whatever happens
            pass
    except OSError as err:
        reason = (err.strerror or type(err).__name__).lower()
        raise ValueError(f"{option} {folder}: not a folder that can be written ({reason})") from None
    return folder


def output_names(paths: Sequence[str | os.PathLike]) -> list[str]:
    """A file name (without suffix) per input, all different, in input order.

    Each is the input's stem; where two inputs share a stem (``a/talk.wav``, ``b/talk.wav``), their
    folders before it, ``a_talk`` and ``b_talk``, as many as tell them apart; what still collides
    (one file given twice, ``talk.wav`` beside ``talk.flac``) gets ``-2``, ``-3``, ... in input order.

    Args:
        paths (list of str or PathLike): the inputs, as given.

    Returns:
        list of str: one name per input.
    """
    stems = [Path(p).stem for p in paths]
    folders = [Path(os.path.abspath(p)).parent.parts[1:] for p in paths]  # without the root
    names = list(stems)
    for stem in {s for s, n in Counter(stems).items() if n > 1}:
        group = [i for i in range(len(paths)) if stems[i] == stem]
        distinct = {folders[i] for i in group}
        if len(distinct) == 1:
            continue
        depth = next(d for d in range(1, 1 + max(map(len, distinct))) if len({f[-d:] for f in distinct}) == len(distinct))
        for i in group:
            names[i] = "_".join([*folders[i][-depth:], stem])
    taken, unique = set(), []
    for name in names:
        candidate, n = name, 1
        while candidate in taken or (n > 1 and candidate in names):
            n += 1
            candidate = f"{name}-{n}"
        taken.add(candidate)
        unique.append(candidate)
    return unique
