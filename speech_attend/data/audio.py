"""Reading audio files into mono float tensors at the model's sample rate.

Everything goes through ``soundfile`` (libsndfile, bundled in the wheel), which reads WAV,
FLAC, OGG/Vorbis and MP3 with no system library. ``torchaudio.load`` is deliberately not used:
since torchaudio 2.9 it needs TorchCodec and FFmpeg.
"""

from __future__ import annotations

import io
import math
import os
import re
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from torchaudio.functional import resample

__all__ = ["AudioError", "load_audio", "load_audio_bytes", "audio_duration", "AUDIO_FORMATS", "MAX_AMPLITUDE"]

AUDIO_FORMATS = "WAV, FLAC, OGG or MP3"

# A decoder may come up a little short of the header's frame count (MP3 encoder padding,
# estimated lengths); only a larger gap means the file was cut off.
_TRUNCATION_SLACK_FRAMES = 4096
_TRUNCATION_SLACK_FRACTION = 0.1
# Loudest sample accepted, 60 dB over full scale: float files may go a little past 1.0, but a
# file far past it is broken (often integer sample values written as floats), and much larger
# values overflow on the way to the model (the float16 audio cache ends at 65504, power at 3e38).
MAX_AMPLITUDE = 1000.0


class AudioError(ValueError):
    """An audio file is missing, empty, unreadable, truncated or holds no samples.

    The message is one line that names the file and says what was expected.
    """


def _check_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise AudioError(f"{path}: a broken link (to {os.readlink(path)}); expected a {AUDIO_FORMATS} audio file")
    if not path.exists():
        raise AudioError(f"{path}: file not found; expected a {AUDIO_FORMATS} audio file")
    if not path.is_file():
        raise AudioError(f"{path}: not a regular file; expected a {AUDIO_FORMATS} audio file")
    if path.stat().st_size == 0:
        raise AudioError(f"{path}: file is empty (0 bytes); expected a {AUDIO_FORMATS} audio file")
    return path


_OPENING = re.compile(r"^Error opening <[^>]*>: ")  # libsndfile's prefix for a file object (bytes from a shard)


def _unreadable(path: Path | str, exc: Exception) -> AudioError:
    # libsndfile's own words ("Format not recognised", "decoder lost sync") tell the user why.
    reason = _OPENING.sub("", str(exc).replace(f"Error opening {str(path)!r}: ", "")).strip() or type(exc).__name__
    if "does not exist" in reason:  # libsndfile's words for some unparseable MP3s
        reason = "unrecognised or corrupt data"
    return AudioError(
        f"{path}: not a readable audio file ({reason}); expected a {AUDIO_FORMATS} audio file"
    )


def load_audio(path: str | os.PathLike, sample_rate: int = 16000) -> torch.Tensor:
    """Read an audio file as a mono waveform at ``sample_rate``.

    Channels are averaged (any count), and the signal is resampled with
    :func:`torchaudio.functional.resample` when the file's rate differs.

    Args:
        path (str or PathLike): a WAV, FLAC, OGG/Vorbis or MP3 file.
        sample_rate (int, optional): rate of the returned waveform in Hz. (Default: ``16000``)

    Returns:
        torch.Tensor: float32 waveform with shape `(T,)`, values in about ``[-1, 1]``.

    Raises:
        AudioError: the file is missing, empty, not audio, truncated or corrupt, has no
            samples, or holds NaN, infinite or absurdly large samples (over ``MAX_AMPLITUDE``).
    """
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive number of Hz, got {sample_rate}")
    path = _check_file(path)
    return _decode(path, path, sample_rate)


def load_audio_bytes(data: bytes, name: str, sample_rate: int = 16000) -> torch.Tensor:
    """:func:`load_audio` of a file's bytes already read (a shard's item), with the same checks.

    Args:
        data (bytes): the whole file, as it was on disk.
        name (str): what the errors call it (the file it came from).
        sample_rate (int, optional): rate of the returned waveform in Hz. (Default: ``16000``)

    Returns:
        torch.Tensor: float32 waveform with shape `(T,)`.

    Raises:
        AudioError: empty, not audio, truncated or corrupt, no samples, or samples out of range.
    """
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive number of Hz, got {sample_rate}")
    if not data:
        raise AudioError(f"{name}: file is empty (0 bytes); expected a {AUDIO_FORMATS} audio file")
    return _decode(io.BytesIO(data), name, sample_rate)


def _decode(source: Path | io.BytesIO, path: Path | str, sample_rate: int) -> torch.Tensor:
    """The waveform of ``source`` (a file or its bytes) at ``sample_rate``; errors name ``path``."""
    try:
        with sf.SoundFile(source) as f:
            header_frames, native_rate = f.frames, f.samplerate
            data = f.read(dtype="float32", always_2d=True)  # (T, C)
    except (sf.SoundFileError, RuntimeError) as exc:
        raise _unreadable(path, exc) from exc

    decoded = data.shape[0]
    if decoded == 0:
        raise AudioError(f"{path}: contains no samples; expected at least one audio frame")
    slack = max(_TRUNCATION_SLACK_FRAMES, int(header_frames * _TRUNCATION_SLACK_FRACTION))
    if decoded + slack < header_frames:
        raise AudioError(
            f"{path}: truncated or corrupt; its header announces {header_frames} frames but "
            f"only {decoded} could be decoded"
        )
    _check_samples(path, data)

    wave = torch.from_numpy(data).mean(dim=1)  # (T, C) -> (T,)
    if native_rate != sample_rate:
        wave = resample(wave, orig_freq=native_rate, new_freq=sample_rate)
    return wave.contiguous()


def _check_samples(path: Path, data: np.ndarray) -> None:
    """Refuse samples that would reach the model as NaN or infinity: non-finite ones, and ones
    so large that their power overflows (see ``MAX_AMPLITUDE``)."""
    low, high = float(data.min()), float(data.max())  # NaN or inf if any sample is
    if not (math.isfinite(low) and math.isfinite(high)):
        bad = int(data.size - np.isfinite(data).sum())
        raise AudioError(
            f"{path}: {bad} of {data.size} samples are NaN or infinite; expected finite audio samples"
        )
    peak = max(high, -low)
    if peak > MAX_AMPLITUDE:
        raise AudioError(
            f"{path}: samples reach {peak:.3g}, {20 * math.log10(peak):.0f} dB over full scale; expected "
            f"audio in about [-1, 1] (at most {MAX_AMPLITUDE:g})"
        )


def audio_duration(path: str | os.PathLike) -> float:
    """Duration of an audio file in seconds, read from its header without decoding.

    Args:
        path (str or PathLike): a WAV, FLAC, OGG/Vorbis or MP3 file.

    Returns:
        float: frames / sample rate. For MP3 this is the header's estimate.

    Raises:
        AudioError: the file is missing, empty or not a readable audio file.
    """
    path = _check_file(path)
    try:
        info = sf.info(str(path))
    except (sf.SoundFileError, RuntimeError) as exc:
        raise _unreadable(path, exc) from exc
    return info.frames / info.samplerate
