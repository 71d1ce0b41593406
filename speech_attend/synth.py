"""The built-in spoken corpus: random sentences spoken by espeak-ng, in LibriSpeech layout.

A "speaker" is one accent (espeak voice) with one voice variant: 8 English accents x 25
variants = 200 speakers, numbered ``(accent + 1) * 100 + variant`` (``100`` is ``gmw/en``
plain, ``314`` is ``gmw/en-GB-scotland+klatt2``). A fixed fifth of them is held out of
training, chosen so that every accent and every variant still appears in training; the held
out speakers are split between dev and test, so both measure speakers never heard in
training and the two share none. Each utterance draws its sentence, speaker, rate, pitch and
volume from a generator seeded by ``(seed, split, index)``, so the corpus is the same, byte
for byte, for a given seed whatever the number of worker processes.

Output of :func:`prepare_synth`::

    <out>/<split>/<speaker>/<chapter>/<speaker>-<chapter>-<utt:04d>.flac   16 kHz, 16-bit
    <out>/<split>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt         upper-case text
    <out>/speakers.json   speaker id -> voice, variant, split
    <out>/synth.json      the settings; written last, it marks a finished corpus
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import random
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from torchaudio.transforms import Resample
from tqdm import tqdm

from .espeak import ESPEAK_SAMPLE_RATE, synthesize
from .sentences import generate_sentence

__all__ = [
    "ACCENTS",
    "VARIANTS",
    "SPLITS",
    "SAMPLE_RATE",
    "Speaker",
    "speakers",
    "speak",
    "prepare_synth",
]

SAMPLE_RATE = 16000
SPLITS = ("train", "dev", "test")
_CHAPTERS = {"train": 1, "dev": 2, "test": 3}  # one chapter per speaker and split

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
# "" is the accent's own voice. Left out: whisper (no voicing) and the novelty voices.
VARIANTS = (
    "", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5",
    "klatt", "klatt2", "klatt3", "croak", "Andy", "Annie", "david", "edward", "linda",
    "steph", "john", "robert",
)
_HOLDOUT_EVERY = 5  # hold out 1 speaker in 5

RATE_RANGE = (130, 200)  # words per minute; espeak's default is 175
PITCH_RANGE = (30, 70)  # 50 is the voice's own pitch
VOLUME_RANGE = (50, 80)  # below espeak's 100, where some voices reach full scale

_SILENCE_THRESHOLD = 10 ** (-50 / 20)  # -50 dBFS
_MAX_PEAK = 0.98  # resampling overshoots a little; stay clear of 16-bit clipping
_MAX_EDGE_SILENCE_S = 0.2
_SERIAL_BELOW = 64  # utterances; fewer are not worth starting processes for


@dataclass(frozen=True)
class Speaker:
    """One synthetic speaker: an espeak accent with a voice variant.

    Args:
        speaker_id (str): numeric id, ``(accent index + 1) * 100 + variant index``.
        voice (str): espeak voice id, e.g. ``"gmw/en-US"``.
        variant (str): espeak variant, e.g. ``"f3"``; ``""`` for the plain voice.
        split (str): the only split it speaks in: ``train``, ``dev`` or ``test``.
    """

    speaker_id: str
    voice: str
    variant: str
    split: str

    @property
    def espeak_name(self) -> str:
        return f"{self.voice}+{self.variant}" if self.variant else self.voice


def speakers() -> list[Speaker]:
    """All 200 speakers with their split; fixed, whatever the seed.

    Speaker ``(a, v)`` (accent and variant indices) is held out when
    ``(v + 2 a) % 5 == 0``: a Latin-square pattern that takes 5 variants from every accent
    and 1 or 2 accents from every variant, so training still covers every accent and every
    variant. Held-out speakers alternate between dev and test.

    Returns:
        list of Speaker: ordered by id.
    """
    result, held_out = [], 0
    for a, voice in enumerate(ACCENTS):
        for v, variant in enumerate(VARIANTS):
            if (v + 2 * a) % _HOLDOUT_EVERY:
                split = "train"
            else:
                split = ("dev", "test")[held_out % 2]
                held_out += 1
            result.append(Speaker(str((a + 1) * 100 + v), voice, variant, split))
    return result


@functools.cache
def _resampler(orig_freq: int, new_freq: int) -> Resample:
    return Resample(orig_freq, new_freq)  # builds the sinc kernel once, not per utterance


def _trim_silence(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    loud = np.flatnonzero(np.abs(wave) > _SILENCE_THRESHOLD)
    if loud.size == 0:
        return wave
    keep = int(_MAX_EDGE_SILENCE_S * sample_rate)
    return wave[max(0, loud[0] - keep): loud[-1] + 1 + keep]


def speak(
    text: str,
    voice: str = "gmw/en",
    rate: int = 175,
    pitch: int = 50,
    volume: int = 70,
    seed: int = 0,
    sample_rate: int = SAMPLE_RATE,
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

    Returns:
        torch.Tensor: float32 waveform with shape `(T,)`.
    """
    pcm = synthesize(text, voice, rate=rate, pitch=pitch, volume=volume, seed=seed)
    wave = torch.from_numpy(pcm.astype(np.float32) / 32768.0)  # (T22,)
    if sample_rate != ESPEAK_SAMPLE_RATE:
        with torch.no_grad():
            wave = _resampler(ESPEAK_SAMPLE_RATE, sample_rate)(wave)  # (T,)
    peak = float(wave.abs().max()) if wave.numel() else 0.0
    if peak > _MAX_PEAK:
        wave = wave * (_MAX_PEAK / peak)
    return torch.from_numpy(_trim_silence(wave.numpy(), sample_rate).copy())


@dataclass(frozen=True)
class _Job:
    path: str
    text: str
    voice: str
    rate: int
    pitch: int
    volume: int
    seed: int


def _run_job(job: _Job) -> None:
    wave = speak(job.text, job.voice, job.rate, job.pitch, job.volume, job.seed).numpy()
    sf.write(job.path, wave, SAMPLE_RATE, format="FLAC", subtype="PCM_16")


def _worker_init() -> None:
    # One thread per process: the pool is the parallelism, and a forked child must not
    # enter the OpenMP pool its parent may have started.
    torch.set_num_threads(1)


def _plan(out: Path, counts: dict[str, int], seed: int) -> tuple[list[_Job], dict[Path, list[str]]]:
    by_split: dict[str, list[Speaker]] = {s: [] for s in SPLITS}
    for speaker in speakers():
        by_split[speaker.split].append(speaker)
    jobs, transcripts = [], {}
    for split in SPLITS:
        next_utt: dict[str, int] = {}
        for index in range(counts[split]):
            rng = random.Random(f"attend-synth/{seed}/{split}/{index}")
            text = generate_sentence(rng)
            speaker = rng.choice(by_split[split])
            rate, pitch, volume = (rng.randint(*RATE_RANGE), rng.randint(*PITCH_RANGE),
                                   rng.randint(*VOLUME_RANGE))
            espeak_seed = rng.getrandbits(31)
            utt = next_utt.get(speaker.speaker_id, 0)
            next_utt[speaker.speaker_id] = utt + 1
            chapter = _CHAPTERS[split]
            folder = out / split / speaker.speaker_id / str(chapter)
            utt_id = f"{speaker.speaker_id}-{chapter}-{utt:04d}"
            transcript = folder / f"{speaker.speaker_id}-{chapter}.trans.txt"
            transcripts.setdefault(transcript, []).append(f"{utt_id} {text.upper()}")
            jobs.append(_Job(str(folder / f"{utt_id}.flac"), text, speaker.espeak_name,
                             rate, pitch, volume, espeak_seed))
    return jobs, transcripts


def _default_workers() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, 8))


def _finished_with(marker: Path, settings: dict) -> bool:
    try:
        return json.loads(marker.read_text()) == settings
    except (OSError, ValueError):  # absent, or cut short by an interrupted run
        return False


def prepare_synth(
    out_dir: str | os.PathLike,
    train: int = 4000,
    dev: int = 200,
    test: int = 200,
    seed: int = 0,
    progress: bool = True,
    workers: int | None = None,
) -> Path:
    """Write the synthetic spoken corpus (layout in the module docstring).

    A finished corpus with the same settings is left as it is; one with other settings, or
    an unfinished one, is replaced. Read it back with
    :func:`speech_attend.corpora.read_librispeech` (``subsets=["train"]`` etc.).

    Args:
        out_dir (str or PathLike): output folder.
        train (int, optional): training utterances. (Default: ``4000``)
        dev (int, optional): validation utterances, unseen speakers. (Default: ``200``)
        test (int, optional): test utterances, unseen speakers. (Default: ``200``)
        seed (int, optional): the corpus depends on nothing else. (Default: ``0``)
        progress (bool, optional): show a tqdm progress bar. (Default: ``True``)
        workers (int or None, optional): processes; ``None`` uses the available cores (at
            most 8). Small corpora are written in-process. (Default: ``None``)

    Returns:
        Path: ``out_dir``.

    Raises:
        ValueError: a count is negative, or ``out_dir`` holds split folders that this
            function did not write.
    """
    counts = {"train": train, "dev": dev, "test": test}
    if any(n < 0 for n in counts.values()):
        raise ValueError(f"utterance counts must be >= 0, got {counts}")
    out = Path(out_dir)
    # Bump "version" whenever the output would change (word lists, voices, ranges).
    settings = {"version": 1, "seed": seed, "sample_rate": SAMPLE_RATE, **counts}
    marker, speakers_file = out / "synth.json", out / "speakers.json"
    if _finished_with(marker, settings):
        return out
    for split in SPLITS:
        folder = out / split
        if folder.exists():
            if not speakers_file.is_file():
                raise ValueError(
                    f"{folder} exists but {out} is not a synthetic corpus (no speakers.json); "
                    "expected an empty or new output folder"
                )
            shutil.rmtree(folder)
    marker.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    speakers_file.write_text(json.dumps(
        {s.speaker_id: {k: v for k, v in asdict(s).items() if k != "speaker_id"} for s in speakers()},
        indent=1,
    ) + "\n")

    jobs, transcripts = _plan(out, counts, seed)
    for transcript, lines in transcripts.items():
        transcript.parent.mkdir(parents=True, exist_ok=True)
        transcript.write_text("\n".join(lines) + "\n")

    workers = _default_workers() if workers is None else max(1, workers)
    bar = tqdm(total=len(jobs), desc=f"synth {out.name}", unit="utt", disable=not progress)
    if workers == 1 or len(jobs) < _SERIAL_BELOW or sys.platform != "linux":
        for job in jobs:
            _run_job(job)
            bar.update()
    else:
        # fork: children start at once, with torch already imported (spawn would re-import it).
        with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_init) as pool:
            for _ in pool.imap_unordered(_run_job, jobs, chunksize=16):
                bar.update()
    bar.close()
    marker.write_text(json.dumps(settings, indent=1) + "\n")
    return out
