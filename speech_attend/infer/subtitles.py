"""Transcripts as the files people load elsewhere: txt, json, srt, vtt and tsv.

The formats and names follow Whisper's command line: ``--output-dir DIR`` gets one file per
input and format, ``DIR/<name>.<format>``, where the name is the input's stem, told apart from
another input's by its folders (:func:`shared.io.outputs.output_names`, the rule of both apps). A
subtitle cue is one segment (a chunk that ``transcribe`` cut at pauses,
:class:`speech_attend.infer.timing.Segment`); segments without speech give no cue. tsv is ``start<TAB>end<TAB>text`` in whole milliseconds, with a header line.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from shared.io.writes import replacing
from speech_attend.infer.transcribe import Transcript

__all__ = ["FORMATS", "parse_formats", "render", "write_outputs"]

FORMATS = ("txt", "json", "srt", "vtt", "tsv")


def parse_formats(value: str) -> list[str]:
    """``"all"``, one format, or several separated by commas -> the formats, in ``FORMATS`` order.

    Raises:
        ValueError: a name that is not a format, in one line listing those that are.
    """
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in (*FORMATS, "all")]
    if unknown or not names:
        raise ValueError(
            f"--output-format {value!r}: unknown format; expected {', '.join(FORMATS)} or all (or several, comma-separated)"
        )
    return list(FORMATS) if "all" in names else [f for f in FORMATS if f in names]


def _timestamp(seconds: float, decimal: str) -> str:
    """``HH:MM:SS,mmm`` (srt) or ``HH:MM:SS.mmm`` (vtt)."""
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{ms:03d}"


def _cues(transcript: Transcript) -> list[tuple[float, float, str]]:
    """``(start, end, text)`` of every segment with words."""
    return [(s.start, s.end, s.text.strip()) for s in transcript.segments if s.text.strip()]


def render(transcript: Transcript, fmt: str) -> str:
    """One transcript as the text of a ``fmt`` file (one of ``FORMATS``)."""
    cues = _cues(transcript)
    if fmt == "txt":
        return "".join(f"{text}\n" for _, _, text in cues)
    if fmt == "json":
        return json.dumps(transcript.to_json(), ensure_ascii=False, indent=1) + "\n"
    if fmt == "srt":
        return "".join(
            f"{i}\n{_timestamp(a, ',')} --> {_timestamp(b, ',')}\n{text}\n\n" for i, (a, b, text) in enumerate(cues, 1)
        )
    if fmt == "vtt":  # <, > and & start markup in WebVTT cue text, so they are escaped (an "<unk>" stays visible)
        return "WEBVTT\n\n" + "".join(
            f"{_timestamp(a, '.')} --> {_timestamp(b, '.')}\n{html.escape(text, quote=False)}\n\n" for a, b, text in cues
        )
    if fmt == "tsv":
        return "start\tend\ttext\n" + "".join(f"{round(a * 1000)}\t{round(b * 1000)}\t{text}\n" for a, b, text in cues)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def write_outputs(transcript: Transcript, out_dir: str | os.PathLike, name: str, formats: list[str]) -> list[Path]:
    """Write ``<out_dir>/<name>.<format>`` for each format; the paths written."""
    written = []
    for fmt in formats:
        path = Path(out_dir) / f"{name}.{fmt}"
        with replacing(path, f"the {fmt} transcript") as temporary:  # whole, or a one-line error (a full disk)
            temporary.write_text(render(transcript, fmt), encoding="utf-8")
        written.append(path)
    return written
