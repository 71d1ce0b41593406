"""Synthetic speakers of the built-in corpus, and the split each one speaks in.

A speaker is a voice of one engine with fixed settings:

- eSpeak NG: an English voice (accent) with a voice variant, ``gmw/en-US+f3``. The light
  corpus (``prepare synth --text templates``) keeps its original 200, the "classic" speakers
  (:func:`classic_espeak_speakers`: 8 accents x 25 variants); the broad corpus (``--text wordnet``)
  uses every English voice with the plain voice and every variant that the installed espeak-ng
  data ships (:func:`espeak_speakers`, read from the data folder).
- piper: the one neural voice, made into many speakers by a pitch shift (semitones) and a formant
  shift (:mod:`speech_attend.data.voice_shift`), :func:`piper_speakers`.

Held-out design. Dev and test speak only with speakers never heard in training:

- eSpeak: voice ``a`` with variant ``v`` is held out when ``(v + 2 a) % 5 == 0``, a Latin-square
  pattern that takes a fifth of the variants from every voice and every variant from one or two
  voices, so every voice and every variant is still heard in training. Held-out speakers
  alternate between dev and test.
- piper: training speakers sit on a grid of whole semitones and formant ratios; dev and test
  speakers sit at the midpoints between grid points (alternating between dev and test), so
  neither their pitch shift nor their formant shift is ever used in training.
"""

from __future__ import annotations

from dataclasses import dataclass

from speech_attend.builtin.espeak import english_voices, voice_variants

__all__ = [
    "SPLITS",
    "ACCENTS",
    "VARIANTS",
    "PIPER_VOICE",
    "PIPER_SEMITONES",
    "PIPER_FORMANT_RATIOS",
    "Speaker",
    "classic_espeak_speakers",
    "espeak_speakers",
    "piper_speakers",
]

SPLITS = ("train", "dev", "test")

# The light corpus's speakers, as they were when its results were measured.
ACCENTS = (
    "gmw/en",
    "gmw/en-US",
    "gmw/en-GB-scotland",
    "gmw/en-GB-x-rp",
    "gmw/en-GB-x-gbclan",
    "gmw/en-GB-x-gbcwmd",
    "gmw/en-US-nyc",
    "gmw/en-029",
)
# "" is the accent's own voice. Left out of the light corpus: whisper and the novelty voices.
VARIANTS = (
    "",
    "m1",
    "m2",
    "m3",
    "m4",
    "m5",
    "m6",
    "m7",
    "f1",
    "f2",
    "f3",
    "f4",
    "f5",
    "klatt",
    "klatt2",
    "klatt3",
    "croak",
    "Andy",
    "Annie",
    "david",
    "edward",
    "linda",
    "steph",
    "john",
    "robert",
)
_HOLDOUT_EVERY = 5  # hold out 1 eSpeak speaker in 5

PIPER_VOICE = "en_US-joe-medium"
PIPER_SEMITONES = tuple(range(-4, 5))  # training pitch shifts; held out: the half semitones between
PIPER_FORMANT_RATIOS = (0.88, 0.92, 0.96, 1.0, 1.04, 1.08, 1.12)  # training; held out: the midpoints


@dataclass(frozen=True)
class Speaker:
    """One synthetic speaker.

    Args:
        speaker_id (str): numeric id, unique within a corpus.
        engine (str): ``"espeak"`` or ``"piper"``.
        voice (str): eSpeak voice id (``"gmw/en-US"``) or the piper voice's name.
        variant (str): eSpeak variant (``"f3"``); ``""`` for the plain voice and for piper.
        split (str): the only split it speaks in: ``train``, ``dev`` or ``test``.
        semitones (float, optional): pitch shift applied to piper's output. (Default: ``0.0``)
        formant_ratio (float, optional): formant shift applied to piper's output. (Default: ``1.0``)
    """

    speaker_id: str
    engine: str
    voice: str
    variant: str
    split: str
    semitones: float = 0.0
    formant_ratio: float = 1.0

    @property
    def espeak_name(self) -> str:
        return f"{self.voice}+{self.variant}" if self.variant else self.voice


def _latin_square(voices: list[str], variants: list[str], id_base: int) -> list[Speaker]:
    """Speaker ``(a, v)`` gets id ``(a + 1) * id_base + v``; held out when ``(v + 2 a) % 5 == 0``."""
    result, held_out = [], 0
    for a, voice in enumerate(voices):
        for v, variant in enumerate(variants):
            if (v + 2 * a) % _HOLDOUT_EVERY:
                split = "train"
            else:
                split = ("dev", "test")[held_out % 2]
                held_out += 1
            result.append(Speaker(str((a + 1) * id_base + v), "espeak", voice, variant, split))
    return result


def classic_espeak_speakers() -> list[Speaker]:
    """The light corpus's 200 eSpeak speakers (``ACCENTS`` x ``VARIANTS``), ids 100 to 824.

    Returns:
        list of Speaker: ordered by id; ``"100"`` is ``gmw/en`` plain, ``"314"`` is
        ``gmw/en-GB-scotland+klatt2``.
    """
    return _latin_square(list(ACCENTS), list(VARIANTS), 100)


def espeak_speakers() -> list[Speaker]:
    """Every English eSpeak voice with the plain voice and every installed variant.

    Returns:
        list of Speaker: ids ``(voice index + 1) * 1000 + variant index`` (variant 0 is plain).
    """
    return _latin_square(english_voices(), [""] + voice_variants(), 1000)


def _midpoints(values: tuple[float, ...]) -> list[float]:
    return [round((a + b) / 2, 4) for a, b in zip(values, values[1:])]


def piper_speakers() -> list[Speaker]:
    """The piper voice at every training shift, and at the held-out midpoints.

    Returns:
        list of Speaker: training speakers first (ids from 9000), then dev and test speakers
        (alternating over the midpoint grid).
    """
    result = []
    for semitones in PIPER_SEMITONES:
        for ratio in PIPER_FORMANT_RATIOS:
            result.append(Speaker(str(9000 + len(result)), "piper", PIPER_VOICE, "", "train", float(semitones), ratio))
    for i, semitones in enumerate(_midpoints(PIPER_SEMITONES)):
        for j, ratio in enumerate(_midpoints(PIPER_FORMANT_RATIOS)):
            split = ("dev", "test")[(i + j) % 2]
            result.append(Speaker(str(9000 + len(result)), "piper", PIPER_VOICE, "", split, semitones, ratio))
    return result
