"""Cutting audio into the chunks a recognizer decodes: at its pauses, trimmed to its speech, and
knowing which chunks hold no speech at all.

An attention model truncates or loops on utterances much longer than those it was trained on, and
invents words for silence at their edges. So ``transcribe`` (:mod:`speech_attend.infer.transcribe`)
decodes a file as chunks (:func:`chunk_audio`):

1. the file loses its DC offset, which would hide its pauses and the rise and fall of its speech
   (:func:`without_offset`);
2. audio longer than the longest piece the model decodes well is cut in the middle of its pauses,
   and further at its quietest points where a phrase is still too long (:func:`split_at_pauses`,
   :func:`split_at_quiet_points`); every chunk, and a file decoded whole, is trimmed to the speech
   it holds;
3. a chunk too short for one listener frame (a click) is widened around its middle
   (:func:`widen_short_chunks`);
4. chunks without speech (silence, steady noise, hum, a held tone, a quiet stretch between speech)
   are found by their levels relative to the file and by the rise and fall of speech
   (:func:`is_silent`), and are left empty instead of decoded.

Energy is measured per 10 ms frame, so an hour of audio costs milliseconds. No model here: the
levels are the waveform's own. A chunk the model decodes but hears no speech in (its CTC head
reads almost none of the speller's characters) is :mod:`speech_attend.infer.timing`'s to find.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

__all__ = [
    "Chunks",
    "chunk_audio",
    "split_at_pauses",
    "split_at_quiet_points",
    "is_silent",
    "widen_short_chunks",
    "without_offset",
    "loudest_dbfs",
    "PAUSE_DB",
    "SPEECH_DB",
    "SILENCE_DBFS",
    "NO_SIGNAL_DBFS",
    "QUIET_DBFS",
]

_QUIET_WINDOW_SECONDS = 0.1  # energy is smoothed over this long before looking for the quietest point
# Relative to the speech level (the 95th percentile of 10 ms frame power): smoothed energy under
# PAUSE_DB is a pause; a frame over SPEECH_DB holds speech, for trimming. Soft consonants sit 20-35
# dB under the vowels, so trimming at -40 dB keeps them.
PAUSE_DB, SPEECH_DB = -35.0, -40.0
_MIN_PAUSE_SECONDS = 0.15  # shorter quiet runs (stop closures, breaths within a phrase) are not cut
_MIN_CHUNK_SECONDS = 0.5  # a shorter piece between two pauses joins the piece before it
_MIN_TRIM_SECONDS = 0.05  # shorter quiet edges of a chunk are not trimmed
# Which chunks hold no speech, so they are left empty instead of decoded (an attention decoder asked
# to transcribe silence invents words). Decided by levels relative to the file and by the rise and
# fall of speech, not by one absolute level: the front end hears a clip the same at any gain, so a
# microphone set 50 dB too low still gives words.
SILENCE_DBFS = -50.0  # a chunk under this at its loudest 10 ms that is also steady (below) is quiet noise
NO_SIGNAL_DBFS = -100.0  # under this at its loudest 10 ms, a chunk holds nothing but rounding noise
QUIET_DBFS = -70.0  # a file whose loudest 10 ms is under this is warned about (speech is usually above -40)
_QUIET_STRETCH_DB = -45.0  # a chunk this far under the file's loudest 10 ms is a quiet stretch between speech
_OFFSET = 1e-2  # a mean sample over this (-40 dBFS) is a DC offset, removed before cutting and the silence test
# A frame power spread (10th to 95th percentile) under this is steady noise, hum or a held tone: speech rises and
# falls more, even a short phrase without a pause (docs/BENCHMARKS.md, "The steadiness rule").
_STEADY_DB = 7.0


@dataclass
class Chunks:
    """A file cut for decoding.

    Attributes:
        wave (torch.Tensor): the audio `(N,)`, without its DC offset (what the chunks are cut from).
        spans (list of (int, int)): the chunks, ``(start, end)`` sample ranges in order, not overlapping.
        silent (set of int): the chunks that hold no speech, left empty instead of decoded.
        loudest_dbfs (float): the file's loudest 10 ms frame (RMS, full scale 1.0).
    """

    wave: torch.Tensor
    spans: list[tuple[int, int]]
    silent: set[int]
    loudest_dbfs: float


def chunk_audio(wave: torch.Tensor, sample_rate: int, max_seconds: float, min_samples: int, trim: bool = True) -> Chunks:
    """Cut a file's audio into the chunks to decode, and find those without speech (steps 1-4 above).

    Args:
        wave (torch.Tensor): `(N,)`, at least ``min_samples`` long.
        sample_rate (int): Hz.
        max_seconds (float): longest chunk.
        min_samples (int): shortest chunk the model decodes (one listener frame).
        trim (bool, optional): trim each chunk's quiet edges (:func:`split_at_pauses`). (Default: ``True``)
    """
    wave = without_offset(wave)
    spans = split_at_pauses(wave, sample_rate, max_seconds, trim=trim)
    spans = widen_short_chunks(spans, min_samples, wave.numel())
    loudest = loudest_dbfs(wave, sample_rate)
    silent = {i for i, (a, b) in enumerate(spans) if is_silent(wave[a:b], sample_rate, loudest)}
    return Chunks(wave, spans, silent, loudest)


def split_at_pauses(
    waveform: torch.Tensor, sample_rate: int, max_seconds: float, min_pause: float = _MIN_PAUSE_SECONDS, trim: bool = True
) -> list[tuple[int, int]]:
    """Cut long speech at its pauses into chunks of at most ``max_seconds``, each trimmed to its speech.

    Audio no longer than ``max_seconds`` stays one chunk. Longer audio is cut in the middle of
    every pause of at least ``min_pause`` (10 ms frames ``PAUSE_DB`` under the speech level, the
    95th percentile of the frame power), so chunks hold whole phrases, as the model heard in
    training; a piece shorter than 0.5 s joins the one before it, and a piece still longer than
    ``max_seconds`` is cut further at its quietest points (:func:`split_at_quiet_points`). Then
    every chunk loses quiet edges of 50 ms or more, down to its first and last frame with speech
    (power over ``SPEECH_DB`` under the speech level); a chunk without speech is kept whole, for
    :func:`is_silent` to find.

    ``speech-attend evaluate --conditions long`` measures what this gives on long files (docs/BENCHMARKS.md).

    Args:
        waveform (torch.Tensor): `(N,)`.
        sample_rate (int): Hz.
        max_seconds (float): longest chunk.
        min_pause (float, optional): shortest pause cut at, in seconds. (Default: ``0.15``)
        trim (bool, optional): trim each chunk's quiet edges; ``False`` keeps them (to measure
            what trimming does). (Default: ``True``)

    Returns:
        list of (int, int): ``(start, end)`` sample ranges in order, not overlapping.
    """
    if max_seconds <= 0:
        raise ValueError(f"max_seconds must be positive, got {max_seconds}")
    total, hop = waveform.numel(), _hop(sample_rate)
    power = _frame_power(waveform, hop)  # (F,)
    level = torch.quantile(power, 0.95)  # loud speech, whatever the recording level
    speech = (power > level * 10 ** (SPEECH_DB / 10)).nonzero().squeeze(1)  # frames with speech

    def trimmed(start: int, end: int) -> tuple[int, int]:
        inside = speech[(speech >= start // hop) & (speech < -(-end // hop))]
        if not trim or inside.numel() == 0:
            return start, end
        # Quiet edges shorter than _MIN_TRIM_SECONDS stay: they are part of the speech's own onset
        # or decay, and moving a clean utterance's start by even 10 ms changes some of its transcripts.
        keep = int(_MIN_TRIM_SECONDS * sample_rate)
        first, last = int(inside[0]) * hop, (int(inside[-1]) + 1) * hop
        return (first if first - start >= keep else start), (last if end - last >= keep else end)

    if total <= int(max_seconds * sample_rate):
        return [trimmed(0, total)]
    quiet = (power <= level * 10 ** (PAUSE_DB / 10)).tolist()
    cuts, run_start = [], None
    for frame, is_quiet in enumerate(quiet + [False]):  # the False closes a run at the end
        if is_quiet and run_start is None:
            run_start = frame
        elif not is_quiet and run_start is not None:
            inside = run_start > 0 and frame < len(quiet)  # leading and trailing silence is trimmed, not cut
            if inside and (frame - run_start) * hop >= min_pause * sample_rate:
                cuts.append((run_start + frame) // 2 * hop)
            run_start = None
    pieces: list[tuple[int, int]] = []
    for start, end in zip([0, *cuts], [*cuts, total]):
        if pieces and end - start < _MIN_CHUNK_SECONDS * sample_rate:
            pieces[-1] = (pieces[-1][0], end)
        else:
            pieces.append((start, end))
    return [
        trimmed(start + a, start + b)
        for start, end in pieces
        for a, b in split_at_quiet_points(waveform[start:end], sample_rate, max_seconds)
    ]


def split_at_quiet_points(
    waveform: torch.Tensor, sample_rate: int, max_seconds: float, min_seconds: float | None = None
) -> list[tuple[int, int]]:
    """Cut a long waveform into chunks of at most ``max_seconds``, at its quietest moments.

    Each cut is placed at the minimum of the smoothed energy between ``min_seconds`` and
    ``max_seconds`` after the previous cut, so it falls in a pause whenever there is one.
    Energy is measured per 10 ms frame, so an hour of audio costs milliseconds.

    Args:
        waveform (torch.Tensor): `(N,)`.
        sample_rate (int): Hz.
        max_seconds (float): longest chunk.
        min_seconds (float or None, optional): shortest chunk but the last; half of
            ``max_seconds`` by default.

    Returns:
        list of (int, int): ``(start, end)`` sample ranges covering the waveform in order.
    """
    if max_seconds <= 0:
        raise ValueError(f"max_seconds must be positive, got {max_seconds}")
    total, longest = waveform.numel(), int(max_seconds * sample_rate)
    if total <= longest:
        return [(0, total)]
    hop = _hop(sample_rate)
    energy = _smoothed_energy(_frame_power(waveform, hop), sample_rate)  # (F,)
    frames = energy.numel()
    shortest = (max_seconds / 2 if min_seconds is None else min_seconds) * sample_rate
    chunks, start = [], 0
    while total - start > longest:
        low = (start + max(hop, int(shortest))) // hop  # frame range where the next cut may go
        high = max(low + 1, min(frames, (start + longest) // hop))
        cut = (low + int(energy[low:high].argmin())) * hop + hop // 2  # middle of the quietest frame
        chunks.append((start, cut))
        start = cut
    chunks.append((start, total))
    return chunks


def is_silent(waveform: torch.Tensor, sample_rate: int, reference_dbfs: float | None = None) -> bool:
    """Whether ``waveform`` `(N,)` holds no speech.

    It does not when its loudest 10 ms frame (RMS, full scale 1.0) is under ``NO_SIGNAL_DBFS``
    (nothing there), more than 45 dB under ``reference_dbfs`` (the loudest frame of the file it
    comes from: a quiet stretch between speech), or under ``SILENCE_DBFS`` while its frame power
    stays within ``_STEADY_DB`` (steady room noise, hum, a held tone; speech rises and falls more).
    """
    power = _frame_power(without_offset(waveform), _hop(sample_rate))  # (F,)
    loudest = _dbfs(power.max())
    if loudest < NO_SIGNAL_DBFS or (reference_dbfs is not None and loudest < reference_dbfs + _QUIET_STRETCH_DB):
        return True
    if loudest >= SILENCE_DBFS:
        return False
    low, high = torch.quantile(power, torch.tensor([0.1, 0.95]))
    return _dbfs(high) - _dbfs(low) < _STEADY_DB


def widen_short_chunks(spans: list[tuple[int, int]], min_samples: int, total: int) -> list[tuple[int, int]]:
    """Widen chunks shorter than one listener frame (a click trimmed to its 20 ms) around their middle,
    within the ``total`` samples of the audio, so every chunk can be decoded."""
    widened = []
    for start, end in spans:
        if end - start < min_samples:
            start = min(max(0, (start + end - min_samples) // 2), total - min_samples)
            end = start + min_samples
        widened.append((start, end))
    return widened


def without_offset(waveform: torch.Tensor) -> torch.Tensor:
    """``waveform`` `(N,)` less its mean when that is a real offset (over -40 dBFS); other audio as it
    is: subtracting a recording's own small mean would put an offset into its digital silence."""
    mean = waveform.mean() if waveform.numel() else waveform.new_zeros(())
    return waveform - mean if float(mean.abs()) > _OFFSET else waveform


def loudest_dbfs(waveform: torch.Tensor, sample_rate: int) -> float:
    """The loudest 10 ms frame of ``waveform`` `(N,)`, RMS in dB under full scale (1.0)."""
    return _dbfs(_frame_power(waveform, _hop(sample_rate)).max())


def _smoothed_energy(power: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """10 ms frame power `(F,)` averaged over ``_QUIET_WINDOW_SECONDS`` around each frame: `(F,)`."""
    window = max(1, int(_QUIET_WINDOW_SECONDS * sample_rate) // _hop(sample_rate))
    return F.avg_pool1d(power[None, None], window, stride=1, padding=window // 2, count_include_pad=False)[0, 0, : power.numel()]


def _frame_power(waveform: torch.Tensor, hop: int) -> torch.Tensor:
    """Mean square of each whole ``hop``-sample frame of ``waveform`` `(N,)`: `(F,)`, at least one
    frame (a waveform shorter than ``hop`` is one short frame)."""
    frames = max(1, waveform.numel() // hop)
    return waveform[: frames * hop].float().reshape(frames, -1).square().mean(1)


def _hop(sample_rate: int) -> int:
    return max(1, sample_rate // 100)  # 10 ms frames


def _dbfs(power: torch.Tensor) -> float:
    return 10 * torch.log10(power + 1e-20).item()
