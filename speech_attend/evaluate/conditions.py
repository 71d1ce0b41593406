"""The conditions a recognizer is scored under: noise, rooms, recordings as people make them, long files.

A condition is named as ``speech-attend evaluate --conditions`` takes it:

- ``clean``: each clip as it is (the reference of every ratio);
- ``babble:SNR``: babble of 3 to 7 of the group's other clips at ``SNR`` dB on the active speech
  (``babble:10`` of ``espeak_unseen`` is the devsets' ``espeak_babble10``, sample for sample);
- ``white:SNR``: white noise at ``SNR`` dB (a 16-bit file recorded 50 dB too low holds about
  ``white:30`` once its level is set);
- ``room``: a simulated room, RT60 0.3 to 0.8 s (of ``espeak_unseen``: the devsets' ``espeak_reverb``);
- ``dc:OFFSET``: scaled by 0.5, then shifted by a constant ``OFFSET`` (full scale 1.0), as cheap
  sound cards add;
- ``level:DB``: the level changed by ``DB`` (``level:-50``, a microphone's gain set far too low: the
  loudest samples are a few hundred steps of the 16-bit scale);
- ``long[:N]``: each speaker's clips joined ``N`` at a time (default 10), 0.25 s of silence between
  them, into files that ``transcribe`` cuts at its pauses: what chunking costs;
- ``timing[:FILESxPER_FILE]``: word and segment times against the truth, on files of eSpeak speech
  made for it (default 25x4; :mod:`speech_attend.evaluate.word_times`), whatever the groups;
- ``non-speech[:SECONDS]``: sounds that hold no speech (silence, noise, hum, tones), ``SECONDS``
  long (default 1, 5, 20 and 60), whatever the groups: how many come out with words.

A clip's condition is a function ``change(wave, others, generator)`` of the clip `(T,)` at 16 kHz,
the group's other clips and a seeded generator, which :func:`apply` draws from clip after clip
(in the order of their paths), as the devsets' derived groups are made. The changed clips are
written as 16-bit files, as a sound card stores them: noise and rooms scaled down to a 0.98 peak
where they exceed it and written as FLAC (as the devsets' groups are: the same samples), offsets
and levels clipped to full scale and written as WAV (whose writer rounds down where FLAC's rounds
to the nearest step: the quiet files as every measurement of them so far was made).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from speech_attend.data.augment import add_noise, babble, coloured_noise, reverberate, room_impulse_response

__all__ = [
    "SAMPLE_RATE",
    "Condition",
    "LongFiles",
    "WordTimes",
    "NonSpeech",
    "with_babble",
    "with_white_noise",
    "in_a_room",
    "limit_peak",
    "parse_condition",
    "parse_conditions",
    "apply",
]

SAMPLE_RATE = 16000
MAX_PEAK = 0.98  # noise and rooms written below 16-bit clipping
BABBLE_SNR_DB = 10.0
RT60 = (0.3, 0.8)  # seconds
DIRECT_TO_REVERB_DB = (0.0, 6.0)
NON_SPEECH_SECONDS = (1.0, 5.0, 20.0, 60.0)

Change = Callable[[torch.Tensor, list[torch.Tensor], torch.Generator], np.ndarray]


@dataclass(frozen=True)
class Condition:
    """What is done to each clip of a group.

    Args:
        name (str): as given on the command line (``"babble:10"``).
        change (callable or None): ``(wave, others, generator) -> float32 array`` ready to write; ``None``: ``clean``.
        seed_offset (int, optional): added to the draws' seed (``room``: 1, as the devsets' ``espeak_reverb``). (Default: ``0``)
        suffix (str, optional): the 16-bit file the changed clips are written as, ``".flac"`` or ``".wav"``. (Default: ``".flac"``)
    """

    name: str
    change: Change | None = None
    seed_offset: int = 0
    suffix: str = ".flac"


@dataclass(frozen=True)
class LongFiles:
    """``long[:N]``: a speaker's clips joined ``clips_per_file`` at a time, ``pause_s`` of silence between them."""

    name: str
    clips_per_file: int = 10
    pause_s: float = 0.25


@dataclass(frozen=True)
class WordTimes:
    """``timing[:FILESxPER_FILE]``: ``files`` files of ``per_file`` eSpeak utterances with their true word times."""

    name: str
    files: int = 25
    per_file: int = 4


@dataclass(frozen=True)
class NonSpeech:
    """``non-speech[:SECONDS]``: sounds without speech of these lengths."""

    name: str
    seconds: tuple[float, ...] = NON_SPEECH_SECONDS


def limit_peak(wave: np.ndarray, max_peak: float = MAX_PEAK) -> np.ndarray:
    """``wave`` scaled down so that its peak is at most ``max_peak`` (unchanged if it is)."""
    peak = float(np.abs(wave).max()) if wave.size else 0.0
    return wave * (max_peak / peak) if peak > max_peak else wave


def with_babble(
    wave: torch.Tensor, others: list[torch.Tensor], generator: torch.Generator, snr_db: float = BABBLE_SNR_DB
) -> torch.Tensor:
    """``wave`` with babble of 3 to 7 of ``others`` (drawn with replacement) at ``snr_db`` on its active speech."""
    talkers = 3 + int(torch.randint(5, (), generator=generator))  # 3 to 7
    chosen = [others[int(j)] for j in torch.randint(len(others), (talkers,), generator=generator)]
    return add_noise(wave, babble(chosen, wave.numel(), generator), snr_db, SAMPLE_RATE)


def with_white_noise(wave: torch.Tensor, others: list[torch.Tensor], generator: torch.Generator, snr_db: float) -> torch.Tensor:
    """``wave`` with white noise at ``snr_db`` on its active speech."""
    return add_noise(wave, coloured_noise(wave.numel(), "white", generator), snr_db, SAMPLE_RATE)


def in_a_room(wave: torch.Tensor, others: list[torch.Tensor], generator: torch.Generator) -> torch.Tensor:
    """``wave`` in a simulated room (RT60 and direct-to-reverberant ratio drawn), at the clip's own peak level."""

    def draw(low_high):
        return low_high[0] + (low_high[1] - low_high[0]) * float(torch.rand((), generator=generator))

    rir = room_impulse_response(draw(RT60), draw(DIRECT_TO_REVERB_DB), SAMPLE_RATE, generator)
    wet = reverberate(wave, rir)
    return wet * (wave.abs().max() / wet.abs().max().clamp_min(1e-9))


def _noise(add: Callable[..., torch.Tensor], **settings: float) -> Change:
    return lambda wave, others, generator: limit_peak(add(wave, others, generator, **settings).numpy())


def _recorded(scale: float, offset: float) -> Change:
    return lambda wave, others, generator: np.clip(scale * wave.numpy() + offset, -1.0, 1.0)


def _level(db: float) -> Change:
    return lambda wave, others, generator: np.clip(wave.numpy() * 10 ** (db / 20), -1.0, 1.0)


_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)"
_FORMS = "clean, babble:SNR, white:SNR, room, dc:OFFSET, level:DB, long[:N], timing[:FILESxPER_FILE], non-speech[:SECONDS]"


def parse_condition(text: str) -> Condition | LongFiles | WordTimes | NonSpeech:
    """One condition from its name (the forms in the module docstring).

    Raises:
        ValueError: a name none of the forms reads, saying which forms there are.
    """
    name = text.strip()
    kind, _, value = name.partition(":")
    number = re.fullmatch(_NUMBER, value) is not None
    if name == "clean":
        return Condition(name)
    if kind in ("babble", "white") and number:
        add = with_babble if kind == "babble" else with_white_noise
        return Condition(name, _noise(add, snr_db=float(value)))
    if name == "room":
        return Condition(name, _noise(in_a_room), seed_offset=1)
    if kind == "dc" and number:
        return Condition(name, _recorded(0.5, float(value)), suffix=".wav")
    if kind == "level" and number:
        return Condition(name, _level(float(value)), suffix=".wav")
    if kind == "long" and (not value or value.isdigit() and int(value) >= 1):
        return LongFiles(name, int(value or LongFiles.clips_per_file))
    sizes = re.fullmatch(r"(\d+)x(\d+)", value)
    if kind == "timing" and (not value or sizes and int(sizes[1]) >= 1 and int(sizes[2]) >= 1):
        return WordTimes(name) if not value else WordTimes(name, int(sizes[1]), int(sizes[2]))
    if kind == "non-speech" and (not value or number and float(value) > 0):
        return NonSpeech(name) if not value else NonSpeech(name, (float(value),))
    raise ValueError(f"--conditions: {name!r} is not a condition; expected some of {_FORMS}")


def parse_conditions(text: str) -> list[Condition | LongFiles | WordTimes | NonSpeech]:
    """Comma-separated conditions, in order, each once; ``clean`` first whenever a group is changed
    (every ratio's reference), and the lengths of several ``non-speech`` entries gathered in one."""
    parsed, seen, lengths = [], set(), []
    for piece in (p for p in text.split(",") if p.strip()):
        condition = parse_condition(piece)
        if condition.name in seen:
            continue
        seen.add(condition.name)
        if isinstance(condition, NonSpeech):
            lengths += [s for s in condition.seconds if s not in lengths]
            continue
        parsed.append(condition)
    if not parsed and not lengths:
        raise ValueError(f"--conditions {text!r}: no condition; expected some of {_FORMS}")
    on_groups = [c for c in parsed if isinstance(c, (Condition, LongFiles))]
    if on_groups and on_groups[0].name != "clean":
        parsed = [Condition("clean")] + [c for c in parsed if c.name != "clean"]
    if lengths:
        parsed.append(NonSpeech("non-speech", tuple(lengths)))
    return parsed


def apply(condition: Condition, waves: list[torch.Tensor], seed: int) -> list[np.ndarray]:
    """Each clip of a group under ``condition``, in order: one generator seeded ``seed +
    condition.seed_offset`` draws for every clip in turn, each clip's ``others`` the rest of the group.

    Args:
        condition (Condition): with a ``change`` (not ``clean``).
        waves (list[torch.Tensor]): the group's clips `(T_i,)` at 16 kHz, in the order of their paths.
        seed (int): the draws' seed (the devsets' own, for their groups' draws).

    Returns:
        list[np.ndarray]: float32 waveforms to write as 16-bit files.
    """
    if condition.change is None:
        raise ValueError(f"{condition.name}: changes no clip")
    if condition.name.startswith("babble") and len(waves) < 2:
        raise ValueError(f"{condition.name}: babble needs a group of at least 2 clips, got {len(waves)}")
    generator = torch.Generator().manual_seed(seed + condition.seed_offset)
    return [condition.change(wave, waves[:i] + waves[i + 1 :], generator) for i, wave in enumerate(waves)]
