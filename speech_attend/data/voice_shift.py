"""New speakers from one voice: pitch shift and formant (vocal-tract-length) shift.

A speaker differs from another mostly by the pitch of the voice (how fast the vocal folds
beat) and by the formants (the resonances of the vocal tract, higher in a shorter one). The two
are shifted independently here:

- :func:`pitch_shift` stretches time with a phase vocoder and resamples back to the original
  length: every frequency, pitch and formants together, is multiplied by ``2 ** (semitones /
  12)``, the duration is unchanged.
- :func:`formant_shift` warps the spectral envelope only: each STFT frame's envelope (its
  log-magnitude spectrum smoothed by keeping the low quefrencies of the cepstrum) is replaced by
  the envelope at ``f / ratio``, while the harmonics (the fine structure) stay where they are, as
  in vocal tract length perturbation (Jaitly and Hinton 2013) applied to the waveform.
- :func:`shift_voice` does both, correcting the formant move that the pitch shift brings.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import torch
from torchaudio.functional import phase_vocoder, resample

__all__ = ["pitch_shift", "formant_shift", "shift_voice"]

_N_FFT = 512  # 32 ms at 16 kHz: resolves harmonics of voices down to about 60 Hz
_HOP = 128
_LIFTER_SECONDS = 0.0025  # quefrencies below 2.5 ms are the envelope; pitch periods are longer
_PEAK_BINS = 5  # 156 Hz at 16 kHz: about one harmonic spacing, so the valleys between harmonics do not pull the envelope down
_MAX_DENOMINATOR = 64  # rational approximation of the resampling ratio (error < 0.03 %)


@functools.cache
def _window(n_fft: int) -> torch.Tensor:
    return torch.hann_window(n_fft)


def _stft(wave: torch.Tensor) -> torch.Tensor:
    return torch.stft(wave, _N_FFT, _HOP, window=_window(_N_FFT), return_complex=True)  # (F, frames)


def _istft(spec: torch.Tensor, length: int) -> torch.Tensor:
    return torch.istft(spec, _N_FFT, _HOP, window=_window(_N_FFT), length=length)


def _fit(wave: torch.Tensor, length: int) -> torch.Tensor:
    if wave.numel() >= length:
        return wave[:length]
    return torch.nn.functional.pad(wave, (0, length - wave.numel()))


def pitch_shift(wave: torch.Tensor, sample_rate: int, semitones: float) -> torch.Tensor:
    """Raise (or lower) every frequency by ``semitones``, keeping the duration.

    The ratio ``2 ** (semitones / 12)`` is rounded to a fraction with a denominator of at most
    64 (within 0.03 %), the resampling ratio.

    Args:
        wave (torch.Tensor): float waveform with shape `(T,)`.
        sample_rate (int): Hz.
        semitones (float): shift; 12 doubles the frequencies, -12 halves them.

    Returns:
        torch.Tensor: shifted waveform with shape `(T,)`.
    """
    if wave.dim() != 1:
        raise ValueError(f"expected a waveform of shape (T,), got {tuple(wave.shape)}")
    if semitones == 0 or wave.numel() < _N_FFT:
        return wave.clone()
    ratio = Fraction(2 ** (semitones / 12)).limit_denominator(_MAX_DENOMINATOR)
    length = wave.numel()
    spec = _stft(wave)  # (F, frames)
    advance = torch.linspace(0, math.pi * _HOP, spec.size(0))[:, None]  # expected phase step per bin
    stretched = phase_vocoder(spec, 1 / float(ratio), advance)  # (F, frames * ratio)
    longer = _istft(stretched, round(length * float(ratio)))  # (T * ratio,)
    # Played back faster by `ratio`: the original duration, every frequency times `ratio`.
    shifted = resample(longer, orig_freq=ratio.numerator, new_freq=ratio.denominator)
    return _fit(shifted, length)


def _log_envelope(magnitude: torch.Tensor, lifter: int) -> torch.Tensor:
    """Smooth log-magnitude envelope `(F, frames)`: a running maximum over ``_PEAK_BINS`` (it
    follows the harmonic peaks), smoothed by cepstral liftering."""
    log = torch.log(magnitude + 1e-8)  # (F, frames)
    peaks = torch.nn.functional.max_pool1d(log.T[:, None], _PEAK_BINS, stride=1, padding=_PEAK_BINS // 2)[:, 0].T
    cepstrum = torch.fft.irfft(peaks, n=_N_FFT, dim=0)  # (N, frames)
    keep = torch.zeros(_N_FFT, 1)
    keep[:lifter] = 1
    keep[-lifter + 1:] = 1  # the cepstrum of a real spectrum is symmetric
    return torch.fft.rfft(cepstrum * keep, n=_N_FFT, dim=0).real  # (F, frames)


def _warp(envelope: torch.Tensor, ratio: float) -> torch.Tensor:
    """``envelope`` read at ``f / ratio`` (linear interpolation; the top bin past Nyquist)."""
    bins = envelope.size(0)
    source = torch.arange(bins, dtype=envelope.dtype) / ratio
    low = source.floor().long().clamp(max=bins - 1)
    high = (low + 1).clamp(max=bins - 1)
    frac = (source - low).clamp(0, 1)[:, None]
    return envelope[low] * (1 - frac) + envelope[high] * frac


def formant_shift(wave: torch.Tensor, sample_rate: int, ratio: float) -> torch.Tensor:
    """Move the spectral envelope (the formants) by ``ratio``, keeping pitch and duration.

    Args:
        wave (torch.Tensor): float waveform with shape `(T,)`.
        sample_rate (int): Hz.
        ratio (float): above 1 raises the formants (a shorter vocal tract), below 1 lowers them.

    Returns:
        torch.Tensor: waveform with shape `(T,)`.
    """
    if wave.dim() != 1:
        raise ValueError(f"expected a waveform of shape (T,), got {tuple(wave.shape)}")
    if ratio <= 0:
        raise ValueError(f"ratio must be positive, got {ratio}")
    if ratio == 1 or wave.numel() < _N_FFT:
        return wave.clone()
    spec = _stft(wave)  # (F, frames)
    envelope = _log_envelope(spec.abs(), max(2, round(_LIFTER_SECONDS * sample_rate)))
    gain = torch.exp(_warp(envelope, ratio) - envelope)  # (F, frames)
    return _istft(spec * gain, wave.numel())


def shift_voice(wave: torch.Tensor, sample_rate: int, semitones: float, formant_ratio: float) -> torch.Tensor:
    """Pitch times ``2 ** (semitones / 12)`` and formants times ``formant_ratio``, same duration.

    Args:
        wave (torch.Tensor): float waveform with shape `(T,)`.
        sample_rate (int): Hz.
        semitones (float): pitch shift.
        formant_ratio (float): formant shift.

    Returns:
        torch.Tensor: waveform with shape `(T,)`.
    """
    shifted = pitch_shift(wave, sample_rate, semitones)
    # The pitch shift moved the formants by 2 ** (semitones / 12) as well: warp the rest of the way.
    return formant_shift(shifted, sample_rate, formant_ratio / 2 ** (semitones / 12))
