"""Every evaluation group of the recognizer, built deterministically into one folder.

    speech-attend prepare devsets --out DIR [--per-group 200] [--seed 0] [--no-engines]
    speech-attend prepare devsets --out DIR --per-group 1000 --seed 7 --espeak-only
    speech-attend prepare devsets --out DIR --human-only

Groups (each a LibriSpeech-layout subset ``DIR/<group>/<speaker>/<chapter>/...``, 16 kHz FLAC
with ``trans.txt``, listed with a description in ``DIR/devsets.json``):

- ``espeak_unseen``: new sentences (the WordNet dev split, never in training), eSpeak voices and
  variants never heard in training;
- ``piper_unseen``: new sentences, the piper voice at pitch and formant shifts never used in
  training (skipped, with a note, when piper is not installed);
- ``flite``, ``festival``: engines never used for training (:mod:`speech_attend.evaluate.engines`;
  skipped, with a note, when the Debian packages are missing, or with ``--no-engines``);
- ``espeak_babble10``: the clips of ``espeak_unseen`` with babble of 3 to 7 of the others at 10 dB
  SNR (the condition ``babble:10`` of :mod:`speech_attend.evaluate.conditions`);
- ``espeak_reverb``: the clips of ``espeak_unseen`` in simulated rooms, RT60 0.3 to 0.8 s (``room``);
- ``human_alsa``: human speech, the 8 spoken clips of alsa-utils' speaker test (one woman: "front
  left", "rear center" and the like; a real recording found in a package, so evaluation only),
  their words taken from their file names (skipped, with a note, when alsa-utils is missing);
- ``human``: every human recording with exact words, each source its own speaker: alsa-utils'
  8 clips, the recordings of Debian's ``pocketsphinx-testdata`` (5 card names, 5 LibriVox
  sentences of *Sense and Sensibility*, "go forward ten meters", five TIDIGITS-style digits), and
  those that ship beside this module in ``human_speech/`` (its README names their repositories
  and licences). Skipped, with a note, unless every source is there, so that its score always
  means the same clips. ``devsets.json``'s ``sources`` names each human utterance's file and licence.

Recordings of people are reserved for evaluation: they go nowhere but these groups.

Score a model on all of them with ``speech-attend evaluate --model MODEL --devsets DIR``.

``--human-only`` writes ``human_alsa`` and ``human`` alone (seconds, no synthesis).
``--espeak-only`` writes ``espeak_unseen`` alone: a larger group of it (another seed, so other
clips) tells ratios apart that 200 clips cannot (``evaluate --conditions level:-50`` against
clean: a 95 % interval about 0.07 wide at 1,000 clips, 0.18 at 200).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from speech_attend.builtin.corpus import prepare_synth
from speech_attend.builtin.piper_voice import missing_packages
from speech_attend.data.audio import load_audio
from speech_attend.data.text import normalize_text
from speech_attend.evaluate.conditions import Condition, apply, parse_condition
from speech_attend.evaluate.engines import MARKER, EngineMissing, build_engine_groups, check_output_folder, mark

__all__ = ["SAMPLE_RATE", "SEED_OFFSET", "HUMAN_SPEECH", "groups_of", "build"]

SAMPLE_RATE = 16000
SEED_OFFSET = 1000  # the groups' utterance draws differ from those of a corpus's own dev split
ALSA_SOUNDS = Path("/usr/share/sounds/alsa")  # alsa-utils' speaker-test clips
_ALSA_CLIPS = ["Front_Left", "Front_Center", "Front_Right", "Rear_Left", "Rear_Center", "Rear_Right", "Side_Left", "Side_Right"]
POCKETSPHINX_DATA = Path("/usr/share/pocketsphinx/test/data")  # pocketsphinx-testdata's recordings
HUMAN_SPEECH = Path(__file__).resolve().parent / "human_speech"  # the recordings that ship, listed in clips.json
# pocketsphinx-testdata's sources, each (folder, its transcription file): lines "<s> ten of clubs </s> (001)" for 001.wav
_POCKETSPHINX_TRANSCRIBED = [("cards", "cards.transcription"), ("librivox", "transcription")]
# Its clips without a transcription file, whose words another file of the package states: goforward.gram's
# first rule, and the TIDIGITS naming (z: zero) that tidigits.lsn follows ("two nine three four zero (man.ah.2934za)").
_POCKETSPHINX_NAMED = [("goforward.raw", "go forward ten meters"), ("tidigits/dhd.2934z.raw", "two nine three four zero")]
_TRANSCRIPTION_LINE = re.compile(r"^(?:<s>)?(.*?)(?:</s>)?\s*\((\S+)\)$")
_LICENCES = {"alsa-utils": "GPL-2 (alsa-utils)", "pocketsphinx-testdata": "BSD-2-Clause (pocketsphinx-testdata)"}


@dataclass(frozen=True)
class _Clip:
    """One human recording: its audio file, its words and where it comes from."""

    audio: Path  # a WAV or FLAC, or a .raw of 16 kHz 16-bit mono little-endian PCM (pocketsphinx's convention)
    text: str
    source: str  # "package: file" or "owner/repo:path@commit"
    licence: str


def _spoken_group(out: Path, name: str, engine: str, count: int, seed: int) -> None:
    """The dev split of a one-engine WordNet corpus, moved to ``out/name``."""
    work = out / f".work-{name}"
    prepare_synth(work, train=0, dev=count, test=0, seed=seed + SEED_OFFSET, progress=False, text="wordnet", engines=(engine,))
    shutil.rmtree(out / name, ignore_errors=True)
    (work / "dev").rename(out / name)
    shutil.rmtree(work)


def _derived_group(out: Path, source: str, name: str, seed: int, condition: Condition) -> None:
    """A copy of group ``source`` with ``condition`` applied to each clip (:func:`~speech_attend.evaluate.conditions.apply`)."""
    shutil.rmtree(out / name, ignore_errors=True)
    shutil.copytree(out / source, out / name, ignore=shutil.ignore_patterns("*.flac"))
    clips = sorted((out / source).rglob("*.flac"))
    waves = [load_audio(path, SAMPLE_RATE) for path in clips]
    for path, changed in zip(clips, apply(condition, waves, seed)):
        sf.write(out / name / path.relative_to(out / source), changed, SAMPLE_RATE, format="FLAC", subtype="PCM_16")


def _read_clip(path: Path) -> np.ndarray:
    if path.suffix == ".raw":
        return np.fromfile(path, dtype="<i2").astype(np.float32) / 32768
    return load_audio(path, SAMPLE_RATE).numpy()


def _write_group(out: Path, name: str, speakers: list[list[_Clip]]) -> list[dict[str, str]]:
    """Write ``speakers`` (each a list of clips) as group ``name``, speaker ``i + 1``, chapter 1, with
    normalised upper-case words (LibriSpeech's); returns each utterance's source entry for ``devsets.json``."""
    shutil.rmtree(out / name, ignore_errors=True)
    sources = []
    for speaker, clips in enumerate(speakers, start=1):
        chapter = out / name / str(speaker) / "1"
        chapter.mkdir(parents=True)
        lines = []
        for i, clip in enumerate(clips):
            utterance = f"{speaker}-1-{i:04d}"
            sf.write(chapter / f"{utterance}.flac", _read_clip(clip.audio), SAMPLE_RATE, format="FLAC", subtype="PCM_16")
            lines.append(f"{utterance} {normalize_text(clip.text).upper()}")
            sources.append({"utterance": utterance, "source": clip.source, "licence": clip.licence})
        (chapter / f"{speaker}-1.trans.txt").write_text("\n".join(lines) + "\n")
    return sources


def _alsa_clips(sounds: Path) -> list[_Clip] | None:
    """alsa-utils' spoken clips in ``sounds``, each clip's words its file name's (``Front_Left.wav``:
    "FRONT LEFT"); None when any is missing."""
    paths = [sounds / f"{clip}.wav" for clip in _ALSA_CLIPS]
    if not all(path.is_file() for path in paths):
        return None
    return [_Clip(path, path.stem.replace("_", " "), f"alsa-utils: {path.name}", _LICENCES["alsa-utils"]) for path in paths]


def _pocketsphinx_clips(data: Path) -> list[list[_Clip]] | None:
    """pocketsphinx-testdata's recordings in ``data``, one list per source (its card names, its LibriVox
    reader, ``goforward.raw``, ``dhd.2934z.raw``); None when any file is missing."""

    def clip(name: str, text: str) -> _Clip:
        return _Clip(data / name, text, f"pocketsphinx-testdata: {name}", _LICENCES["pocketsphinx-testdata"])

    needed = [data / folder / transcription for folder, transcription in _POCKETSPHINX_TRANSCRIBED]
    if not all(path.is_file() for path in needed + [data / name for name, _ in _POCKETSPHINX_NAMED]):
        return None
    sources = []
    for (folder, _), transcription in zip(_POCKETSPHINX_TRANSCRIBED, needed):
        lines = [_TRANSCRIPTION_LINE.match(line.strip()) for line in transcription.read_text().splitlines() if line.strip()]
        if not all(lines):
            raise ValueError(f"{transcription}: expected lines '<s> words </s> (file id)'")
        sources.append([clip(f"{folder}/{m.group(2)}.wav", m.group(1)) for m in lines])
    sources += [[clip(name, text)] for name, text in _POCKETSPHINX_NAMED]
    if not all(c.audio.is_file() for clips in sources for c in clips):
        return None
    return sources


def _committed_clips(folder: Path) -> list[list[_Clip]]:
    """The clips committed in ``folder`` (``clips.json``: file, text, repository, path, commit, licence),
    one speaker each."""
    return [
        [_Clip(folder / c["file"], c["text"], f"{c['repository']}:{c['path']}@{c['commit'][:8]}", c["licence"])]
        for c in json.loads((folder / "clips.json").read_text())
    ]


def _human_groups(out: Path, sounds: Path, pocketsphinx: Path, committed: Path) -> tuple[dict[str, str], dict[str, list]]:
    """``human_alsa`` and ``human``, those whose sources are all there (a note for each left out);
    returns name -> description and name -> the utterances' sources."""
    groups, sources = {}, {}
    alsa = _alsa_clips(sounds)
    package = _pocketsphinx_clips(pocketsphinx)
    if alsa is None:
        print(f"human_alsa skipped: no alsa-utils speaker-test clips in {sounds} (apt-get install alsa-utils)")
    else:
        sources["human_alsa"] = _write_group(out, "human_alsa", [alsa])
        groups["human_alsa"] = "human speech: alsa-utils' 8 speaker-test clips (one woman, 'front left' and the like)"
    if package is None:
        print(f"human skipped: no pocketsphinx-testdata recordings in {pocketsphinx} (apt-get install pocketsphinx-testdata)")
    elif alsa is None:
        print("human skipped: it needs alsa-utils' clips too (apt-get install alsa-utils)")
    else:
        speakers = [alsa] + package + _committed_clips(committed)
        sources["human"] = _write_group(out, "human", speakers)
        count = sum(len(clips) for clips in speakers)
        groups["human"] = (
            f"human speech, evaluation only: {count} recordings of {len(speakers)} sources (alsa-utils, "
            "pocketsphinx-testdata, the recordings that ship with the code), each its own speaker"
        )
    return groups, sources


def _record_sources(out: Path, sources: dict[str, list]) -> None:
    """Add each human group's utterance sources to ``out/devsets.json`` (after :func:`~speech_attend.evaluate.engines.mark`,
    which keeps only the groups)."""
    marker = out / MARKER
    listing = json.loads(marker.read_text())
    listing["sources"] = sources
    marker.write_text(json.dumps(listing, indent=1) + "\n")


def _synthetic_groups(out: Path, per_group: int, seed: int, engines: bool, espeak_only: bool) -> dict[str, str]:
    """The spoken groups and those derived from them (``espeak_unseen`` alone with ``espeak_only``)."""
    groups = {}
    _spoken_group(out, "espeak_unseen", "espeak", per_group, seed)
    groups["espeak_unseen"] = "new sentences, eSpeak voices and variants never heard in training"
    if espeak_only:
        return groups
    if missing_packages():
        print(f"piper_unseen skipped: piper needs {', '.join(missing_packages())}")
    else:
        _spoken_group(out, "piper_unseen", "piper", per_group, seed)
        groups["piper_unseen"] = "new sentences, the piper voice at pitch and formant shifts never used in training"
    mark(out, groups)  # marked before the engine groups, so prepare_synth refuses the folder
    if engines:
        try:
            groups.update(build_engine_groups(out, ["flite", "festival"], per_group, seed))
        except EngineMissing as err:
            print(f"flite and festival skipped: {err}")
    if len(list((out / "espeak_unseen").rglob("*.flac"))) > 1:
        _derived_group(out, "espeak_unseen", "espeak_babble10", seed, parse_condition("babble:10"))
        groups["espeak_babble10"] = "espeak_unseen with babble of 3 to 7 other clips at 10 dB SNR"
        _derived_group(out, "espeak_unseen", "espeak_reverb", seed, parse_condition("room"))  # its draws: seed + 1
        groups["espeak_reverb"] = "espeak_unseen in simulated rooms, RT60 0.3 to 0.8 s"
    return groups


def build(
    out: Path,
    per_group: int,
    seed: int,
    engines: bool = True,
    human: Path | None = ALSA_SOUNDS,
    espeak_only: bool = False,
    pocketsphinx: Path = POCKETSPHINX_DATA,
    human_speech: Path = HUMAN_SPEECH,
    human_only: bool = False,
) -> dict[str, str]:
    """Write every group into ``out``; returns name -> description (also in ``out/devsets.json``).
    ``human`` is the folder of alsa-utils' speaker-test clips (None: no human groups), ``pocketsphinx``
    the recordings of pocketsphinx-testdata and ``human_speech`` the committed ones (``clips.json``);
    ``espeak_only`` writes ``espeak_unseen`` alone, ``human_only`` the human groups alone."""
    if espeak_only and human_only:
        raise ValueError("espeak_only and human_only exclude each other; expected at most one")
    check_output_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    groups, sources = {}, {}
    if not human_only:
        groups.update(_synthetic_groups(out, per_group, seed, engines, espeak_only))
    if human is not None and not espeak_only:
        human_groups, sources = _human_groups(out, human, pocketsphinx, human_speech)
        groups.update(human_groups)
    mark(out, groups)
    if sources:
        _record_sources(out, sources)
    return groups


def groups_of(devsets: Path) -> list[str]:
    """The groups of ``devsets``: those listed in ``devsets.json``, else every subfolder with transcripts."""
    marker = devsets / MARKER
    if marker.is_file():
        listed = json.loads(marker.read_text())["groups"]
        return [name for name in listed if (devsets / name).is_dir()]
    return sorted(p.name for p in devsets.iterdir() if p.is_dir() and any(p.rglob("*.trans.txt")))
