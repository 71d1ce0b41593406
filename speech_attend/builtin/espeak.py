"""Text to speech with espeak-ng through ctypes, for the built-in spoken corpus.

The ``espeakng-loader`` wheel ships ``libespeak-ng.so`` (1.52) and its data, so no system
package is needed. The C API used (``speak_lib.h``)::

    int  espeak_Initialize(espeak_AUDIO_OUTPUT output, int buflength, const char *path, int options);
    void espeak_SetSynthCallback(int (*cb)(short *wav, int numsamples, espeak_EVENT *events));
    espeak_ERROR espeak_SetVoiceByName(const char *name);
    espeak_ERROR espeak_SetParameter(espeak_PARAMETER parameter, int value, int relative);
    espeak_ERROR espeak_Synth(const void *text, size_t size, unsigned int position,
                              espeak_POSITION_TYPE position_type, unsigned int end_position,
                              unsigned int flags, unsigned int *unique_identifier, void *user_data);
    espeak_ERROR espeak_Synchronize(void);
    espeak_ERROR espeak_Terminate(void);
    espeak_ng_STATUS espeak_ng_SetRandSeed(long seed);

Why the library is reloaded for every call: espeak keeps synthesis state in static
variables that neither ``espeak_Terminate`` nor ``espeak_Initialize`` resets (the pitch
"flutter" index, the gain control, the libc ``rand()`` stream used for breath noise), so the
same text comes out different depending on what was spoken before. Unloading the library
(``dlclose``) and loading it again restores its static data from the file, which makes
:func:`synthesize` a pure function of its arguments, at little cost per call.

espeak-ng 1.52 crashes (a segmentation fault) on a few rare inputs: one of the 32,000 broad-corpus
utterances, ``"we will be that much ahead of them"`` with ``gmw/en-US+rob`` at pitch range 79
and word gap 3. A crash takes its process with it, so :func:`synthesize_isolated` speaks in a
forked child and turns a crash into :class:`EspeakCrash`; it costs three to four times a plain call, so
the corpus writer uses it only to redo work that a crash lost.
"""

from __future__ import annotations

import _ctypes
import ctypes
import faulthandler
import itertools
import os
import signal
import threading
from pathlib import Path
from typing import NamedTuple

import espeakng_loader
import numpy as np

__all__ = [
    "EspeakError",
    "EspeakCrash",
    "WordEvent",
    "synthesize",
    "synthesize_isolated",
    "synthesize_with_words",
    "english_voices",
    "voice_variants",
    "ESPEAK_SAMPLE_RATE",
]

ESPEAK_SAMPLE_RATE = 22050  # what espeak_Initialize returns for every non-MBROLA voice

# Constants from speak_lib.h.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000  # report missing data as an error instead of calling exit()
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_PARAM_RATE, _PARAM_VOLUME, _PARAM_PITCH, _PARAM_RANGE, _PARAM_WORDGAP = 1, 2, 3, 4, 7
_EE_OK = 0

# int (*t_espeak_callback)(short *wav, int numsamples, espeak_EVENT *events): return 0 to go on.
_SynthCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
_EVENT_LIST_TERMINATED, _EVENT_WORD = 0, 1  # espeak_EVENT_TYPE


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    """``espeak_EVENT`` of speak_lib.h; ``sample`` is the event's sample index in the output."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


class WordEvent(NamedTuple):
    """Where eSpeak starts speaking a word: ``text[position : position + length]`` starts at
    sample ``sample`` of the waveform (``ESPEAK_SAMPLE_RATE``)."""

    position: int  # characters from the start of the text (0-based)
    length: int  # characters of the word
    sample: int


class EspeakError(RuntimeError):
    """espeak-ng could not be loaded, did not know a voice, or failed to synthesise."""


class EspeakCrash(EspeakError):
    """espeak-ng died on one input (a signal, not an error it reported)."""


class _Engine:
    """One process-wide espeak-ng instance; every call holds the lock (espeak is not reentrant)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lib: ctypes.CDLL | None = None
        self.chunks: list[bytes] = []
        self.words: list[WordEvent] = []  # the word events of the current call
        # Kept on the instance so the C side never calls a collected Python object.
        self.callback = _SynthCallback(self._on_audio)
        self.libc = ctypes.CDLL(None)
        self.libc.srand.argtypes = [ctypes.c_uint]
        self.libc.srand.restype = None

    def _on_audio(self, wav, numsamples, events) -> int:
        if numsamples > 0 and wav:
            self.chunks.append(ctypes.string_at(wav, numsamples * ctypes.sizeof(ctypes.c_short)))
        event = ctypes.cast(events, ctypes.POINTER(_Event)) if events else None
        for i in itertools.count() if event else ():  # the list ends with an event of type 0
            if event[i].type == _EVENT_LIST_TERMINATED:
                break
            if event[i].type == _EVENT_WORD:  # text_position counts from 1
                self.words.append(WordEvent(event[i].text_position - 1, event[i].length, event[i].sample))
        return 0

    def _unload(self) -> None:
        if self.lib is not None:
            self.lib.espeak_Terminate()
            _ctypes.dlclose(self.lib._handle)
            self.lib = None

    def reload(self) -> ctypes.CDLL:
        self._unload()
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.POINTER(ctypes.c_uint),
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Synchronize.argtypes = []
        lib.espeak_Synchronize.restype = ctypes.c_int
        lib.espeak_Terminate.argtypes = []
        lib.espeak_Terminate.restype = ctypes.c_int
        lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
        lib.espeak_ng_SetRandSeed.restype = ctypes.c_int  # espeak_ng_STATUS, 0 = ENS_OK

        data_path = espeakng_loader.get_data_path().encode()
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path, _INITIALIZE_DONT_EXIT)
        if rate != ESPEAK_SAMPLE_RATE:
            _ctypes.dlclose(lib._handle)
            raise EspeakError(
                f"espeak_Initialize returned {rate}; expected sample rate {ESPEAK_SAMPLE_RATE} (data folder {data_path.decode()})"
            )
        lib.espeak_SetSynthCallback(self.callback)
        self.lib = lib
        return lib


_ENGINE = _Engine()


# Reads the Shavian alphabet; for Latin-script text it speaks exactly as ``gmw/en`` does, so it
# would only add copies of that voice's speakers.
_SAME_AS_ANOTHER_VOICE = {"gmw/en-Shaw"}


def english_voices() -> list[str]:
    """Every English voice of the installed espeak-ng data, as ids for :func:`synthesize`.

    The voice files are ``espeak-ng-data/lang/<family>/en*`` (``gmw/en``, ``gmw/en-US``,
    ``gmw/en-GB-scotland``, ...); ``gmw/en-Shaw`` is left out (it speaks Latin-script text as
    ``gmw/en`` does).

    Returns:
        list of str: sorted voice ids.
    """
    lang = Path(espeakng_loader.get_data_path()) / "lang"
    voices = {path.relative_to(lang).as_posix() for path in lang.glob("*/en*") if path.is_file()}
    return sorted(voices - _SAME_AS_ANOTHER_VOICE)


def voice_variants() -> list[str]:
    """Every voice variant of the installed espeak-ng data (``m1``, ``f3``, ``klatt``, ``whisper``, ...).

    A variant changes the voice's pitch, formants, breathiness, roughness or synthesiser
    (``klatt*``) and combines with any voice as ``"<voice>+<variant>"``.

    Returns:
        list of str: the file names of ``espeak-ng-data/voices/!v``, sorted.
    """
    folder = Path(espeakng_loader.get_data_path()) / "voices" / "!v"
    return sorted(path.name for path in folder.iterdir() if path.is_file())


def _check(status: int, what: str) -> None:
    if status != _EE_OK:
        raise EspeakError(f"{what} failed with espeak error {status}")


def _check_variant(voice: str) -> None:
    # espeak_SetVoiceByName silently ignores an unknown "+variant" and speaks the plain voice.
    _, plus, variant = voice.partition("+")
    if plus and not (Path(espeakng_loader.get_data_path()) / "voices" / "!v" / variant).is_file():
        raise EspeakError(f"unknown espeak voice variant {variant!r} in {voice!r}")


def synthesize(
    text: str,
    voice: str = "gmw/en",
    rate: int = 175,
    pitch: int = 50,
    volume: int = 100,
    seed: int = 0,
    pitch_range: int = 50,
    word_gap: int = 0,
) -> np.ndarray:
    """Speak ``text`` with espeak-ng; the same arguments always give the same samples.

    Args:
        text (str): plain text (no SSML), UTF-8 encodable.
        voice (str, optional): espeak voice id, optionally with a variant, e.g. ``"gmw/en"``,
            ``"gmw/en-US+f3"``, ``"gmw/en-GB-scotland+klatt"``. (Default: ``"gmw/en"``)
        rate (int, optional): speaking rate in words per minute, 80 to 450. (Default: ``175``)
        pitch (int, optional): base pitch, 0 to 100 (50 is the voice's normal). (Default: ``50``)
        volume (int, optional): amplitude, 0 to 200 (100 is normal). (Default: ``100``)
        seed (int, optional): seed of espeak's noise generators. (Default: ``0``)
        pitch_range (int, optional): intonation range, 0 (monotone) to 100; 50 is the voice's
            own. (Default: ``50``)
        word_gap (int, optional): extra pause between words, in units of 10 ms. (Default: ``0``)

    Returns:
        np.ndarray: int16 waveform with shape `(T,)` at ``ESPEAK_SAMPLE_RATE`` Hz.

    Raises:
        EspeakError: the voice or variant is unknown, or synthesis failed.
        ValueError: an argument is out of range.
    """
    return synthesize_with_words(text, voice, rate, pitch, volume, seed, pitch_range, word_gap)[0]


def synthesize_with_words(
    text: str,
    voice: str = "gmw/en",
    rate: int = 175,
    pitch: int = 50,
    volume: int = 100,
    seed: int = 0,
    pitch_range: int = 50,
    word_gap: int = 0,
) -> tuple[np.ndarray, list[WordEvent]]:
    """:func:`synthesize`, with where each word starts: the same samples, and eSpeak's word events.

    Returns:
        (np.ndarray, list[WordEvent]): the int16 waveform `(T,)` at ``ESPEAK_SAMPLE_RATE`` Hz
        and one event per word eSpeak spoke, in order (a number may be spoken as several words
        under one event).
    """
    if not 80 <= rate <= 450:
        raise ValueError(f"rate must be 80 to 450 words per minute, got {rate}")
    if not 0 <= pitch <= 100:
        raise ValueError(f"pitch must be 0 to 100, got {pitch}")
    if not 0 <= volume <= 200:
        raise ValueError(f"volume must be 0 to 200, got {volume}")
    if not 0 <= pitch_range <= 100:
        raise ValueError(f"pitch_range must be 0 to 100, got {pitch_range}")
    if not 0 <= word_gap <= 100:
        raise ValueError(f"word_gap must be 0 to 100 (units of 10 ms), got {word_gap}")
    _check_variant(voice)
    encoded = text.encode("utf-8")
    with _ENGINE.lock:
        lib = _ENGINE.reload()
        status = lib.espeak_SetVoiceByName(voice.encode("utf-8"))
        if status != _EE_OK:
            raise EspeakError(f"unknown espeak voice {voice!r} (espeak error {status})")
        _check(lib.espeak_SetParameter(_PARAM_RATE, rate, 0), "setting the rate")
        _check(lib.espeak_SetParameter(_PARAM_PITCH, pitch, 0), "setting the pitch")
        _check(lib.espeak_SetParameter(_PARAM_VOLUME, volume, 0), "setting the volume")
        _check(lib.espeak_SetParameter(_PARAM_RANGE, pitch_range, 0), "setting the pitch range")
        _check(lib.espeak_SetParameter(_PARAM_WORDGAP, word_gap, 0), "setting the word gap")
        _check(lib.espeak_ng_SetRandSeed(seed), "espeak_ng_SetRandSeed")
        _ENGINE.libc.srand(seed & 0xFFFFFFFF)  # ApplyBreath() draws from libc rand()
        _ENGINE.chunks.clear()
        _ENGINE.words.clear()
        # size counts the terminating NUL; the synchronous mode returns when all audio is out.
        _check(
            lib.espeak_Synth(encoded, len(encoded) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None),
            "espeak_Synth",
        )
        _check(lib.espeak_Synchronize(), "espeak_Synchronize")
        audio = np.frombuffer(b"".join(_ENGINE.chunks), dtype=np.int16).copy()
        words = list(_ENGINE.words)
        _ENGINE.chunks.clear()
        _ENGINE.words.clear()
    return audio, words


def synthesize_isolated(text: str, voice: str = "gmw/en", **settings: int) -> np.ndarray:
    """:func:`synthesize` in a forked child process: the same samples, and a crash of espeak-ng
    raises :class:`EspeakCrash` here instead of ending this process (Linux and macOS).

    Args:
        text (str): as :func:`synthesize`.
        voice (str, optional): as :func:`synthesize`. (Default: ``"gmw/en"``)
        **settings (int): :func:`synthesize`'s ``rate``, ``pitch``, ``volume``, ``seed``,
            ``pitch_range`` and ``word_gap``, by name.

    Returns:
        np.ndarray: as :func:`synthesize`.

    Raises:
        EspeakCrash: espeak-ng died speaking this input.
        EspeakError, ValueError: as :func:`synthesize`.
    """
    read_end, write_end = os.pipe()
    with _ENGINE.lock:  # no other thread is inside espeak while the child is made
        pid = os.fork()
    if pid == 0:  # the child: speak, send a status byte and the samples (or the error), leave at once
        os.close(read_end)
        faulthandler.disable()  # a crash here is reported as EspeakCrash, not as a dump
        _ENGINE.lock = threading.Lock()  # the parent's, held at the fork, is not this process's to wait on
        try:
            payload = b"\x00" + synthesize(text, voice, **settings).tobytes()
        except BaseException as err:  # noqa: BLE001  the child must always reach os._exit
            payload = b"\x01" + f"{type(err).__name__}: {err}".encode("utf-8", "replace")
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        payload = pipe.read()  # to the end, before waiting: the samples outgrow the pipe's buffer
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) or not payload:
        cause = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        raise EspeakCrash(f"espeak-ng crashed ({cause}) speaking {text!r} with {voice} and {settings}")
    if payload[:1] == b"\x01":
        name, _, message = payload[1:].decode("utf-8").partition(": ")
        raise (ValueError if name == "ValueError" else EspeakError)(message)
    return np.frombuffer(payload[1:], dtype=np.int16).copy()
