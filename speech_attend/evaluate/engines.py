"""Evaluation groups spoken by synthesisers the recognizer never trains on: Flite and Festival.

Speaks dev sentences of the WordNet text (never in training) with every installed Flite voice
(``slt``, ``kal``, ``kal16``, ``awb``, ``rms``) and Festival voice (``kal_diphone``,
``ked_diphone``, ``cmu_us_slt_arctic_hts``), and writes each engine as one LibriSpeech-layout
group, ``DIR/<engine>/<speaker>/<chapter>/...`` (16 kHz FLAC + ``trans.txt``): part of
``speech-attend prepare devsets`` (:mod:`speech_attend.evaluate.devsets`), scored by
``speech-attend evaluate`` or ``speech-attend test --data.data_dir DIR --data.test_split flite``.

These engines are reserved for evaluation. The output can never become training data: it holds
only named evaluation groups (no ``train`` split for ``fit`` to read), ``DIR/devsets.json``
marks the folder, and ``speech-attend prepare synth`` refuses to write into a folder so marked.
Flite and Festival are Debian packages (``apt-get install flite festival festvox-kallpc16k
festvox-kdlpc16k festvox-us-slt-hts``); without them :func:`build_engine_groups` raises :class:`EngineMissing`,
one line naming them.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from speech_attend.builtin.wordnet_sentences import load_sentences, split_sentences
from speech_attend.data.audio import load_audio

__all__ = [
    "MARKER",
    "EngineMissing",
    "voice_of",
    "require",
    "voices",
    "dev_sentences",
    "check_output_folder",
    "mark",
    "build_engine_groups",
]

SAMPLE_RATE = 16000
MARKER = "devsets.json"  # prepare_synth refuses folders holding it
FLITE_VOICES = ("slt", "kal", "kal16", "awb", "rms")
FESTIVAL_VOICES = ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")
PACKAGES = {
    "flite": "flite",
    "festival": "festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts",
}
_VOICES = {"flite": FLITE_VOICES, "festival": FESTIVAL_VOICES}
_PROGRAMS = {"flite": "flite", "festival": "text2wave"}
_SPEAKER_BASE = {"flite": 7000, "festival": 7100}
_CHAPTER = 2  # the dev chapter of the built-in corpus
_MAX_PEAK = 0.98
_FESTIVAL_VOICE_DIRS = (Path("/usr/share/festival/voices"), Path("/usr/lib/festival/voices"))


def voice_of(group: str, speaker: str) -> str | None:
    """The voice behind a speaker id of an engine's group (``("flite", "7001")`` -> ``"kal"``), else
    ``None`` (other groups' ids are their own: eSpeak's run into the same numbers)."""
    index = int(speaker) - _SPEAKER_BASE[group] if group in _SPEAKER_BASE and speaker.isdigit() else -1
    return _VOICES[group][index] if 0 <= index < len(_VOICES[group]) else None


class EngineMissing(RuntimeError):
    """A program of the asked-for engines is not installed (the message names the Debian packages)."""


def require(engines: list[str]) -> None:
    """Raise :class:`EngineMissing`, naming the Debian packages, unless every engine's program is installed."""
    missing = [e for e in engines if shutil.which(_PROGRAMS[e]) is None]
    if missing:
        packages = " ".join(PACKAGES[e] for e in missing)
        programs = ", ".join(_PROGRAMS[e] for e in missing)
        raise EngineMissing(f"{programs} not found; install the Debian packages: apt-get install {packages}")


def voices(engine: str) -> list[str]:
    """The engine's installed voices among those listed above."""
    if engine == "flite":
        listed = subprocess.run(["flite", "-lv"], capture_output=True, text=True, check=True).stdout.split()
        return [v for v in FLITE_VOICES if v in listed]
    found = {p.name for folder in _FESTIVAL_VOICE_DIRS if folder.is_dir() for p in folder.glob("*/*") if p.is_dir()}
    return [v for v in FESTIVAL_VOICES if v in found]


def _speak(engine: str, voice: str, text: str, wav: Path) -> None:
    if engine == "flite":
        command = ["flite", "-voice", voice, "-t", text, "-o", str(wav)]
        subprocess.run(command, check=True, capture_output=True, timeout=120)
    else:
        command = ["text2wave", "-eval", f"(voice_{voice})", "-o", str(wav)]
        subprocess.run(command, input=text, text=True, check=True, capture_output=True, timeout=120)


def _write_group(out: Path, engine: str, sentences: list[str], rng: random.Random) -> int:
    names = voices(engine)
    if not names:
        raise EngineMissing(
            f"{engine} has none of the voices {', '.join(_VOICES[engine])}; "
            f"install the Debian packages: apt-get install {PACKAGES[engine]}"
        )
    lines: dict[Path, list[str]] = {}
    counters: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for sentence in sentences:
            voice = names[rng.randrange(len(names))]
            speaker = str(_SPEAKER_BASE[engine] + _VOICES[engine].index(voice))  # one speaker id per voice
            wav = Path(tmp) / "out.wav"
            _speak(engine, voice, sentence, wav)
            wave = load_audio(wav, SAMPLE_RATE).numpy()
            peak = float(np.abs(wave).max()) if wave.size else 0.0
            if peak > _MAX_PEAK:
                wave = wave * (_MAX_PEAK / peak)
            utt = counters.get(speaker, 0)
            counters[speaker] = utt + 1
            folder = out / engine / speaker / str(_CHAPTER)
            folder.mkdir(parents=True, exist_ok=True)
            utt_id = f"{speaker}-{_CHAPTER}-{utt:04d}"
            sf.write(folder / f"{utt_id}.flac", wave, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
            lines.setdefault(folder / f"{speaker}-{_CHAPTER}.trans.txt", []).append(f"{utt_id} {sentence.upper()}")
    for transcript, entries in lines.items():
        transcript.write_text("\n".join(entries) + "\n")
    return len(sentences)


def dev_sentences(count: int, seed: int) -> list[str]:
    """``count`` dev sentences of the WordNet text (never in training), in a seeded order."""
    pool = split_sentences(load_sentences())["dev"]
    random.Random(f"engine-devset/{seed}").shuffle(pool)
    return pool[:count]


def check_output_folder(out: Path) -> None:
    """Refuse a folder that holds a training corpus: evaluation audio must never sit beside one."""
    if (out / "synth.json").exists() or (out / "speakers.json").exists() or (out / "train").exists():
        raise ValueError(f"{out} holds a training corpus; evaluation sets go in a folder of their own")


def mark(out: Path, groups: dict[str, str]) -> None:
    """Add ``groups`` (name -> description) to ``out/devsets.json``."""
    marker = out / MARKER
    known = json.loads(marker.read_text())["groups"] if marker.is_file() else {}
    known.update(groups)
    marker.write_text(json.dumps({"purpose": "evaluation only, never training", "groups": known}, indent=1) + "\n")


def build_engine_groups(out: Path, engines: list[str], count: int, seed: int) -> dict[str, str]:
    """Write one group per engine into ``out``; returns name -> description of the groups written."""
    require(engines)
    check_output_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    sentences = dev_sentences(count, seed)
    groups = {}
    for engine in engines:
        if (out / engine).exists():
            shutil.rmtree(out / engine)
        _write_group(out, engine, sentences, random.Random(f"engine-devset/{seed}/{engine}"))
        groups[engine] = f"{engine} voices ({', '.join(voices(engine))}), new sentences; never used for training"
    mark(out, groups)
    return groups
