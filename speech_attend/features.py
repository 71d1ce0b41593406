"""Acoustic features: waveform -> 80-d log-mel -> global normalisation -> SpecAugment.

The whole front end lives inside the model, so training, validation and ``transcribe`` share
one code path, and the feature settings and the training-set statistics travel with every
checkpoint (the statistics are buffers). SpecAugment (Park et al. 2019) masks frequency bands
and time spans, in training only.

Frame arithmetic is exact (``center=False``): a waveform of ``N >= win`` samples gives
``1 + (N - win) // hop`` frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torchaudio.transforms import MelSpectrogram

from shared import lengths_to_mask

__all__ = ["FeatureConfig", "LogMel", "GlobalNorm", "SpecAugment", "FeatureFrontend"]


@dataclass(frozen=True)
class FeatureConfig:
    """Feature settings; saved with the model, so inference computes the same features."""

    sample_rate: int = 16000  # Hz; audio is resampled to this on reading
    n_mels: int = 80  # mel bands
    win_ms: float = 25.0  # analysis window
    hop_ms: float = 10.0  # frame shift
    freq_masks: int = 2  # SpecAugment frequency masks per utterance (0 disables)
    freq_mask_width: int = 27  # widest frequency mask, in mel bands (F of Park et al.)
    time_masks: int = 2  # SpecAugment time masks per utterance (0 disables)
    time_mask_width: int = 40  # widest time mask, in frames (T of Park et al.)
    time_mask_ratio: float = 0.2  # a time mask covers at most this fraction of the utterance (p)

    def __post_init__(self):
        if self.sample_rate <= 0 or self.n_mels <= 0 or self.win_ms <= 0 or self.hop_ms <= 0:
            raise ValueError(f"feature sizes must be positive, got {self}")
        if not 0.0 <= self.time_mask_ratio <= 1.0:
            raise ValueError(f"time_mask_ratio must be in [0, 1], got {self.time_mask_ratio}")

    @property
    def win_length(self) -> int:
        return int(round(self.sample_rate * self.win_ms / 1000))

    @property
    def hop_length(self) -> int:
        return int(round(self.sample_rate * self.hop_ms / 1000))


class LogMel(nn.Module):
    """Log mel filterbank energies.

    Args:
        config (FeatureConfig): window, hop, bands and sample rate.
    """

    def __init__(self, config: FeatureConfig):
        super().__init__()
        self.win, self.hop = config.win_length, config.hop_length
        # n_fft = window, so a frame spans exactly the window and the frame count is exact.
        self.mel = MelSpectrogram(
            config.sample_rate, n_fft=self.win, win_length=self.win, hop_length=self.hop,
            n_mels=config.n_mels, center=False, power=2.0,
        )

    def num_frames(self, num_samples: torch.Tensor) -> torch.Tensor:
        """Frames for each waveform length `(B,)`; 0 for waveforms shorter than one window."""
        return torch.where(num_samples >= self.win, 1 + (num_samples - self.win) // self.hop, 0)

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            waveforms (torch.Tensor): padded audio with shape `(B, N)`.
            lengths (torch.Tensor): samples per waveform `(B,)`.

        Returns:
            (torch.Tensor, torch.Tensor): features `(B, T, n_mels)` and frames per utterance `(B,)`.

        Raises:
            ValueError: a waveform holds NaN or infinite samples, or samples so large that their
                power overflows.
        """
        if waveforms.size(1) < self.win:  # too short for one frame: pad so the shapes still work
            waveforms = nn.functional.pad(waveforms, (0, self.win - waveforms.size(1)))
        with torch.autocast(waveforms.device.type, enabled=False):  # the FFT wants float32
            power = self.mel(waveforms.float())  # (B, n_mels, T)
        features = torch.log(power + 1e-6).transpose(1, 2)  # (B, T, n_mels)
        frames = self.num_frames(lengths)
        features = features.masked_fill(~lengths_to_mask(frames, features.size(1)).unsqueeze(-1), 0.0)
        # One check covers NaN and infinite samples and a power that overflows float32: the file
        # readers refuse such audio, this stops waveforms handed in directly.
        if not bool(torch.isfinite(features).all()):
            raise ValueError(_non_finite_reason(waveforms, lengths))
        return features, frames


def _non_finite_reason(waveforms: torch.Tensor, lengths: torch.Tensor) -> str:
    """Why waveforms `(B, N)` with lengths `(B,)` gave non-finite features, in one line."""
    valid = lengths_to_mask(lengths, waveforms.size(1))
    bad = (~torch.isfinite(waveforms) & valid).sum(1)  # (B,)
    if bad.any():
        rows = bad.nonzero().squeeze(1).tolist()
        return (
            f"waveforms hold {int(bad.sum())} NaN or infinite samples (batch rows {rows}); "
            "expected finite audio samples"
        )
    peak = float(waveforms.masked_fill(~valid, 0.0).abs().max())
    return f"the log-mel power overflows: samples reach {peak:.3g}; expected audio in about [-1, 1]"


class GlobalNorm(nn.Module):
    """Per-band mean/variance normalisation with statistics of the training set (buffers).

    Args:
        num_features (int): feature size ``D``.
    """

    def __init__(self, num_features: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("std", torch.ones(num_features))
        self.register_buffer("frames", torch.zeros((), dtype=torch.long))  # 0 = not computed yet

    @property
    def initialised(self) -> bool:
        return int(self.frames) > 0

    @torch.no_grad()
    def set_statistics(self, total: torch.Tensor, total_sq: torch.Tensor, frames: int) -> None:
        """Set mean and std from sums over ``frames`` frames (float64 `(D,)` sums)."""
        if frames <= 0:
            raise ValueError("feature statistics need at least one frame of training audio")
        mean = total / frames
        var = (total_sq / frames - mean**2).clamp_min(1e-8)
        self.mean.copy_(mean.float())
        self.std.copy_(var.sqrt().float())
        self.frames.fill_(frames)

    def forward(self, features: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """`(B, T, D)` -> `(B, T, D)`; padding frames stay 0."""
        mask = lengths_to_mask(frames, features.size(1)).unsqueeze(-1)
        return ((features - self.mean) / self.std) * mask


class SpecAugment(nn.Module):
    """Frequency and time masking (Park et al. 2019), drawn independently per utterance.

    Masked values become 0, the mean of normalised features. Does nothing in eval mode.

    Args:
        config (FeatureConfig): the ``freq_*`` and ``time_*`` settings.
    """

    def __init__(self, config: FeatureConfig):
        super().__init__()
        self.freq_masks, self.freq_width = config.freq_masks, config.freq_mask_width
        self.time_masks, self.time_width, self.time_ratio = config.time_masks, config.time_mask_width, config.time_mask_ratio

    @staticmethod
    def _spans(num: int, max_width: torch.Tensor, extent: torch.Tensor, size: int) -> torch.Tensor:
        """Union of ``num`` random spans per row, each at most ``max_width`` wide, inside ``extent``.

        Returns a bool mask `(B, size)`, True where masked.
        """
        batch = extent.size(0)
        device = extent.device
        masked = torch.zeros(batch, size, dtype=torch.bool, device=device)
        positions = torch.arange(size, device=device)
        for _ in range(num):
            width = (torch.rand(batch, device=device) * (max_width + 1).float()).long()  # U{0..max_width}
            width = torch.minimum(width, extent)
            start = (torch.rand(batch, device=device) * (extent - width + 1).float()).long()
            masked |= (positions[None, :] >= start[:, None]) & (positions[None, :] < (start + width)[:, None])
        return masked

    def forward(self, features: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """Args:
            features (torch.Tensor): `(B, T, D)`, normalised.
            frames (torch.Tensor): valid frames per utterance `(B,)`.

        Returns:
            torch.Tensor: `(B, T, D)` with masks applied (training) or unchanged (eval).
        """
        if not self.training:
            return features
        batch, steps, bands = features.shape
        if self.freq_masks:
            width = torch.full((batch,), self.freq_width, device=features.device)
            extent = torch.full((batch,), bands, device=features.device)
            features = features.masked_fill(self._spans(self.freq_masks, width, extent, bands)[:, None, :], 0.0)
        if self.time_masks:
            width = torch.minimum(torch.full_like(frames, self.time_width), (frames.float() * self.time_ratio).long())
            features = features.masked_fill(self._spans(self.time_masks, width, frames, steps)[:, :, None], 0.0)
        return features


class FeatureFrontend(nn.Module):
    """Waveforms to normalised (and, in training, augmented) log-mel features.

    Args:
        config (FeatureConfig): feature settings.
    """

    def __init__(self, config: FeatureConfig):
        super().__init__()
        self.config = config
        self.logmel = LogMel(config)
        self.norm = GlobalNorm(config.n_mels)
        self.spec_augment = SpecAugment(config)

    @property
    def frame_seconds(self) -> float:
        return self.config.hop_ms / 1000

    @torch.no_grad()
    def accumulate_statistics(self, batches) -> int:
        """Compute the global statistics from an iterable of ``(waveforms, lengths)`` batches.

        Returns:
            int: frames seen.
        """
        total = torch.zeros(self.config.n_mels, dtype=torch.float64)
        total_sq = torch.zeros_like(total)
        count = 0
        for waveforms, lengths in batches:
            features, frames = self.logmel(waveforms.to(self.norm.mean.device), lengths.to(self.norm.mean.device))
            valid = features[lengths_to_mask(frames, features.size(1))].double().cpu()  # (frames, D)
            total += valid.sum(0)
            total_sq += (valid**2).sum(0)
            count += valid.size(0)
        self.norm.set_statistics(total, total_sq, count)
        return count

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            waveforms (torch.Tensor): `(B, N)` padded audio at ``config.sample_rate``.
            lengths (torch.Tensor): samples per waveform `(B,)`.

        Returns:
            (torch.Tensor, torch.Tensor): features `(B, T, n_mels)` and frames `(B,)`.
        """
        features, frames = self.logmel(waveforms, lengths)
        features = self.norm(features, frames)
        return self.spec_augment(features, frames), frames
