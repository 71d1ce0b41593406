"""Acoustic features: waveform -> DC removal and level -> 80-d log-mel, less a quiet file's rounding noise -> global normalisation -> (utterance mean) -> SpecAugment.

Recordings come with a constant offset (cheap sound cards, some phones) and at any level (a
microphone's gain set too low). Before the log-mel, each utterance loses its mean (DC) and is
scaled so that its speech level (the 95th percentile of its 10 ms frame power) sits at
``level_dbfs``: the features of a clip are then the same at any gain and any offset.

The level step also lifts a quiet file's own noise: a 16-bit file recorded 50 dB too low holds
its rounding noise about 30 dB under the speech once the level is set, where a file recorded at
a good level holds none that the log-mel sees. ``rounding_noise`` takes it out of the quiet
file, where it is known: a file whose samples all lie on the grid of a ``b``-bit file (step
``q = 2^(1-b)``, 8 <= b <= 16) holds white rounding noise of variance ``q^2 / 12``, which the
level gain ``g`` scales by ``g^2``. Each mel band's power loses ``rounding_noise`` times its
expected share (spectral subtraction, Boll 1979), down to at most the fraction
``rounding_floor`` of itself:

    P'_m = max(P_m - rounding_noise * (g q)^2 / 12 * sum_n w_n^2 * sum_k F_km,  rounding_floor * P_m)

with ``w`` the analysis window and ``F`` the mel filterbank (``E|X_k|^2 = sigma^2 sum_n w_n^2``
for white noise of variance ``sigma^2``).

A file at a good level barely changes (its rounding sits about 80 dB under its speech); audio off
every grid (resampled, decoded from MP3, augmented) does not change at all.

A channel or a voice engine colours every frame alike: a fixed gain ``|H_m|^2`` per mel band is a
constant ``log |H_m|^2`` added to every frame's log-mel. ``utterance_mean`` takes it out
(cepstral mean normalisation, here on the log-mel): each band loses its mean over the
utterance's loud frames ``S``, those within ``utterance_mean_db`` of its loud speech (the 95th
percentile of the frames' mean log power), so that pauses and leading silence do not move it:

    x'_td = x_td - sum_{t in S} x_td / |S|

A model trained without it has learned the training voices' colours, and relearns slowly once they
are gone. ``colour_shrink`` takes part of the way instead: each band's loud-frame mean ``m_d``
moves the fraction ``alpha`` of the way to ``mu_d``, the mean of ``m_d`` over training utterances
(a buffer, computed with the global statistics):

    x'_td = x_td - alpha * (m_d - mu_d),   m_d = sum_{t in S} x_td / |S|

``alpha`` 0 leaves the features as they are, 1 gives every utterance the training set's mean
colour (the utterance mean, less a constant).

The whole front end lives inside the model, so training, validation and ``transcribe`` share
one code path, and the feature settings and the training-set statistics travel with every
checkpoint (the statistics are buffers). SpecAugment (Park et al. 2019) masks frequency bands
and time spans, in training only.

Frame arithmetic is exact (``center=False``): a waveform of ``N >= win`` samples gives
``1 + (N - win) // hop`` frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torchaudio.transforms import MelSpectrogram

from shared import lengths_to_mask

__all__ = [
    "FeatureConfig",
    "remove_dc",
    "speech_level",
    "level_gain",
    "normalise_level",
    "sample_step",
    "LogMel",
    "GlobalNorm",
    "loud_frames",
    "loud_mean",
    "subtract_utterance_mean",
    "ColourShrink",
    "SpecAugment",
    "FeatureFrontend",
]

# The loudest sample the front end takes, as the audio readers (speech_attend.data.audio): past it
# the frame powers of the level step overflow, and such input is not audio but a broken file.
MAX_AMPLITUDE = 1000.0

_LEVEL_FRAME_MS = 10.0  # frames over which the speech level is measured
_LEVEL_PERCENTILE = 0.95  # loud speech, whatever the share of pauses
_LEVEL_FLOOR = 1e-10  # frame power (-100 dBFS) below which a waveform is not amplified further
_GRID_BITS = range(16, 7, -1)  # the bit depths whose rounding noise is subtracted: 16 down to 8


@dataclass(frozen=True)
class FeatureConfig:
    """Feature settings; saved with the model, so inference computes the same features (a model saved
    before a step existed keeps it off: :mod:`speech_attend.model.migrations`)."""

    sample_rate: int = 16000  # Hz; audio is resampled to this on reading
    n_mels: int = 80  # mel bands
    win_ms: float = 25.0  # analysis window
    hop_ms: float = 10.0  # frame shift
    freq_masks: int = 2  # SpecAugment frequency masks per utterance (0 disables)
    freq_mask_width: int = 27  # widest frequency mask, in mel bands (F of Park et al.)
    time_masks: int = 2  # SpecAugment time masks per utterance (0 disables)
    time_mask_width: int = 40  # widest time mask, in frames (T of Park et al.)
    time_mask_ratio: float = 0.2  # a time mask covers at most this fraction of the utterance (p)
    remove_dc: bool = True  # subtract each utterance's mean sample (a constant offset) first
    level_dbfs: float | None = -20.0  # scale each utterance's speech level to this (None: keep the level)
    rounding_noise: float = 1.5  # times a file's expected rounding noise subtracted from each mel band (0: none)
    rounding_floor: float = 0.1  # a band keeps at least this fraction of its power after the subtraction
    utterance_mean: bool = False  # subtract each band's mean over the utterance's loud frames (a fixed colour goes)
    utterance_mean_db: float = 30.0  # loud frames: within this of the utterance's loud speech
    colour_shrink: float = 0.0  # move each band's loud-frame mean this fraction of the way to the training set's (0: off)

    def __post_init__(self):
        if self.sample_rate <= 0 or self.n_mels <= 0 or self.win_ms <= 0 or self.hop_ms <= 0:
            raise ValueError(f"feature sizes must be positive, got {self}")
        if not 0.0 <= self.time_mask_ratio <= 1.0:
            raise ValueError(f"time_mask_ratio must be in [0, 1], got {self.time_mask_ratio}")
        if self.level_dbfs is not None and not -60.0 <= self.level_dbfs <= 0.0:
            raise ValueError(f"level_dbfs must be in [-60, 0] dBFS or None, got {self.level_dbfs}")
        if not 0.0 <= self.rounding_noise <= 10.0:
            raise ValueError(f"rounding_noise must be in [0, 10], got {self.rounding_noise}")
        if not 0.0 < self.rounding_floor <= 1.0:
            raise ValueError(f"rounding_floor must be in (0, 1], got {self.rounding_floor}")
        if not 0.0 < self.utterance_mean_db <= 120.0:
            raise ValueError(f"utterance_mean_db must be in (0, 120] dB, got {self.utterance_mean_db}")
        if not 0.0 <= self.colour_shrink <= 1.0:
            raise ValueError(f"colour_shrink must be in [0, 1], got {self.colour_shrink}")
        if self.colour_shrink > 0 and self.utterance_mean:
            raise ValueError("colour_shrink and utterance_mean both take out an utterance's colour; set one of them")

    @property
    def win_length(self) -> int:
        return int(round(self.sample_rate * self.win_ms / 1000))

    @property
    def hop_length(self) -> int:
        return int(round(self.sample_rate * self.hop_ms / 1000))


def remove_dc(waveforms: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Subtract each waveform's mean over its own samples; padding stays 0.

    Args:
        waveforms (torch.Tensor): `(B, N)` padded audio.
        lengths (torch.Tensor): samples per waveform `(B,)`.

    Returns:
        torch.Tensor: `(B, N)`.
    """
    valid = lengths_to_mask(lengths, waveforms.size(1))
    mean = (waveforms * valid).sum(1, keepdim=True) / lengths.clamp_min(1)[:, None]  # (B, 1)
    return (waveforms - mean) * valid


def speech_level(waveforms: torch.Tensor, lengths: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """Each waveform's speech level: the 95th percentile of its 10 ms frame power, `(B,)`.

    A percentile rather than the mean, so leading silence or pauses do not change it; frames
    are whole frames of the waveform's own samples (one short frame if it has fewer).
    """
    hop = max(1, int(sample_rate * _LEVEL_FRAME_MS / 1000))
    steps = max(1, waveforms.size(1) // hop)
    padded = nn.functional.pad(waveforms, (0, steps * hop - waveforms.size(1))) if waveforms.size(1) < hop else waveforms
    power = padded[:, : steps * hop].reshape(waveforms.size(0), steps, -1).float().square().mean(-1)  # (B, F)
    frames = (lengths // hop).clamp_min(1)
    return _loud_percentile(power, lengths_to_mask(frames, steps))


def _loud_percentile(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The 95th percentile of each row's ``valid`` values: ``values`` `(B, F)`, ``valid`` bool `(B, F)` -> `(B,)`
    (NaN for a row with none). A percentile rather than the maximum, so one click does not set it."""
    return torch.nanquantile(values.masked_fill(~valid, float("nan")), _LEVEL_PERCENTILE, dim=1)


def level_gain(waveforms: torch.Tensor, lengths: torch.Tensor, sample_rate: int, level_dbfs: float) -> torch.Tensor:
    """The gain that brings each waveform's :func:`speech_level` to ``level_dbfs`` (RMS, full scale 1.0), `(B,)`.

    Waveforms quieter than -100 dBFS (digital silence, rounding noise) get at most the gain
    that would bring -100 dBFS to the target, not an unbounded one.
    """
    level = speech_level(waveforms, lengths, sample_rate).clamp_min(_LEVEL_FLOOR)  # (B,)
    return torch.sqrt(10 ** (level_dbfs / 10) / level)


def normalise_level(waveforms: torch.Tensor, lengths: torch.Tensor, sample_rate: int, level_dbfs: float) -> torch.Tensor:
    """Scale each waveform by its :func:`level_gain`. `(B, N)` -> `(B, N)`."""
    return waveforms * level_gain(waveforms, lengths, sample_rate, level_dbfs)[:, None].to(waveforms.dtype)


def sample_step(waveforms: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each waveform's rounding step, `(B,)`: ``2^(1-b)`` for the fewest bits ``b`` in 8..16 whose
    grid holds every one of its samples (as a ``b``-bit file's do once read), 0 when none does
    (24-bit or float audio, or audio resampled or decoded from a lossy format)."""

    def on_grid(samples: torch.Tensor, valid: torch.Tensor, bits: int) -> torch.Tensor:  # (R, n) -> (R,)
        scaled = samples.float() * 2.0 ** (bits - 1)
        return ((scaled - scaled.round()).abs().le(1e-3) | ~valid).all(1)

    positions = torch.arange(waveforms.size(1), device=waveforms.device)
    steps = torch.zeros(waveforms.size(0), device=waveforms.device)
    rows = torch.arange(waveforms.size(0), device=waveforms.device)
    for bits in _GRID_BITS:  # finest first: a coarser grid lies on every finer one, so a row off one is done
        for stride in (16, 1):  # every 16th sample rules most rows out, then every sample decides
            valid = positions[::stride] < lengths[rows, None]
            rows = rows[on_grid(waveforms[rows, ::stride], valid, bits)]
        steps[rows] = 2.0 ** (1 - bits)
        if rows.numel() == 0:
            break
    return steps


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
            config.sample_rate,
            n_fft=self.win,
            win_length=self.win,
            hop_length=self.hop,
            n_mels=config.n_mels,
            center=False,
            power=2.0,
        )
        self.rounding_noise, self.rounding_floor = config.rounding_noise, config.rounding_floor
        # These follow from the settings, so they are not saved (state dicts stay as they were).
        self.register_buffer("unit_noise", self.white_noise_power(1.0), persistent=False)

    def white_noise_power(self, variance: float) -> torch.Tensor:
        """Each mel band's expected power for white noise of ``variance``, `(n_mels,)`."""
        window_energy = self.mel.spectrogram.window.square().sum()
        return variance * window_energy * self.mel.mel_scale.fb.sum(0)  # fb: (n_freqs, n_mels)

    def mel_power(self, waveforms: torch.Tensor) -> torch.Tensor:
        """Each frame's power in each mel band, ``sum_k F_km |X_tk|^2``: `(B, N)` -> `(B, n_mels, T)`.

        The same as ``self.mel(waveforms)`` (torchaudio's MelSpectrogram, whose window and filterbank
        it uses), with ``|X|^2`` taken as ``re^2 + im^2``: torchaudio takes the complex magnitude
        and squares it, which costs more on a CPU than the rest of the log-mel together.
        """
        spectrum = torch.stft(
            waveforms, self.win, self.hop, self.win, window=self.mel.spectrogram.window, center=False, return_complex=True
        )  # (B, n_freqs, T)
        power = spectrum.real.square() + spectrum.imag.square()
        return torch.matmul(power.transpose(1, 2), self.mel.mel_scale.fb).transpose(1, 2)

    def num_frames(self, num_samples: torch.Tensor) -> torch.Tensor:
        """Frames for each waveform length `(B,)`; 0 for waveforms shorter than one window."""
        return torch.where(num_samples >= self.win, 1 + (num_samples - self.win) // self.hop, 0)

    def forward(
        self, waveforms: torch.Tensor, lengths: torch.Tensor, rounding_variance: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            waveforms (torch.Tensor): padded audio with shape `(B, N)`.
            lengths (torch.Tensor): samples per waveform `(B,)`.
            rounding_variance (torch.Tensor, optional): each waveform's rounding noise variance `(B,)`,
                subtracted from its mel power (times ``rounding_noise``).

        Returns:
            (torch.Tensor, torch.Tensor): features `(B, T, n_mels)` and frames per utterance `(B,)`.

        Raises:
            ValueError: a waveform holds NaN or infinite samples, or samples so large that their
                power overflows.
        """
        if waveforms.size(1) < self.win:  # too short for one frame: pad so the shapes still work
            waveforms = nn.functional.pad(waveforms, (0, self.win - waveforms.size(1)))
        with torch.autocast(waveforms.device.type, enabled=False):  # the FFT wants float32
            power = self.mel_power(waveforms.float())  # (B, n_mels, T)
        if rounding_variance is not None and self.rounding_noise > 0:  # a variance of 0 leaves the power as it is
            noise = self.rounding_noise * rounding_variance[:, None, None] * self.unit_noise[None, :, None]  # (B, n_mels, 1)
            power = torch.maximum(power - noise, self.rounding_floor * power)
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
        return f"waveforms hold {int(bad.sum())} NaN or infinite samples (batch rows {rows}); expected finite audio samples"
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


def loud_frames(features: torch.Tensor, frames: torch.Tensor, range_db: float) -> torch.Tensor:
    """The frames whose mean log power lies within ``range_db`` of the utterance's loud speech.

    Args:
        features (torch.Tensor): natural-log mel powers `(B, T, D)` (before normalisation).
        frames (torch.Tensor): valid frames per utterance `(B,)`.
        range_db (float): how far under the 95th percentile of the frames' mean log power a loud
            frame may lie.

    Returns:
        torch.Tensor: bool `(B, T)`, False on padding; at least one frame of each non-empty utterance.
    """
    valid = lengths_to_mask(frames, features.size(1))  # (B, T)
    energy = features.mean(-1)  # (B, T)
    loud = _loud_percentile(energy, valid)[:, None]  # (B, 1)
    return valid & (energy >= loud - range_db * math.log(10) / 10)  # dB -> nats of power


def loud_mean(features: torch.Tensor, loud: torch.Tensor) -> torch.Tensor:
    """Each band's mean over the loud frames: `(B, T, D)`, bool `(B, T)` -> `(B, D)` (0 where none is loud)."""
    weights = loud.unsqueeze(-1).to(features.dtype)  # (B, T, 1)
    return (features * weights).sum(1) / weights.sum(1).clamp_min(1.0)


def subtract_utterance_mean(features: torch.Tensor, frames: torch.Tensor, loud: torch.Tensor) -> torch.Tensor:
    """Each band less its mean over its utterance's loud frames.

    Args:
        features (torch.Tensor): `(B, T, D)`.
        frames (torch.Tensor): valid frames per utterance `(B,)`.
        loud (torch.Tensor): bool `(B, T)`, the frames the mean is taken over (:func:`loud_frames`).

    Returns:
        torch.Tensor: `(B, T, D)`; padding frames stay 0.
    """
    return (features - loud_mean(features, loud).unsqueeze(1)) * lengths_to_mask(frames, features.size(1)).unsqueeze(-1)


class ColourShrink(nn.Module):
    """Moves each utterance's colour part of the way to the training set's mean colour.

    ``x'_td = x_td - alpha * (m_d - mu_d)``, with ``m_d`` the band's mean over the utterance's loud
    frames and ``mu_d`` its mean over training utterances (a buffer, as :class:`GlobalNorm`'s).

    Args:
        num_features (int): feature size ``D``.
        alpha (float): the fraction of the way, in (0, 1].
    """

    def __init__(self, num_features: int, alpha: float):
        super().__init__()
        self.alpha = alpha
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("utterances", torch.zeros((), dtype=torch.long))  # 0 = not computed yet

    @property
    def initialised(self) -> bool:
        return int(self.utterances) > 0

    @torch.no_grad()
    def set_mean(self, total: torch.Tensor, utterances: int) -> None:
        """Set ``mu`` from the sum of ``utterances`` loud-frame means (float64 `(D,)`)."""
        if utterances <= 0:
            raise ValueError("the training colour needs at least one utterance of training audio")
        self.mean.copy_((total / utterances).float())
        self.utterances.fill_(utterances)

    def forward(self, features: torch.Tensor, frames: torch.Tensor, loud: torch.Tensor) -> torch.Tensor:
        """`(B, T, D)` log-mel (before normalisation) -> `(B, T, D)`; padding frames stay 0."""
        shift = self.alpha * (loud_mean(features, loud) - self.mean)  # (B, D)
        return (features - shift[:, None, :]) * lengths_to_mask(frames, features.size(1)).unsqueeze(-1)


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
        # Only a model that shrinks colours holds the training colour, so other state dicts stay as they were.
        self.colour = ColourShrink(config.n_mels, config.colour_shrink) if config.colour_shrink > 0 else None
        self.spec_augment = SpecAugment(config)

    @property
    def frame_seconds(self) -> float:
        return self.config.hop_ms / 1000

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    def condition(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The waveform steps before the log-mel: DC removal, then the speech level.

        Returns:
            (torch.Tensor, torch.Tensor): the waveforms `(B, N)` and their rounding noise variance
            after the level gain `(B,)` (0 for audio off every grid, see :func:`sample_step`).
        """
        rounding_variance = (
            sample_step(waveforms, lengths).square() / 12  # before the steps move samples off the grid
            if self.config.rounding_noise > 0
            else waveforms.new_zeros(waveforms.size(0))
        )
        if self.config.remove_dc:
            waveforms = remove_dc(waveforms.float(), lengths)
        if self.config.level_dbfs is not None:
            gain = level_gain(waveforms.float(), lengths, self.config.sample_rate, self.config.level_dbfs)  # (B,)
            waveforms = waveforms.float() * gain[:, None]
            rounding_variance = rounding_variance * gain.square()
        return waveforms, rounding_variance

    def _logmel(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # A non-finite sample is refused by LogMel's check, not spread over the utterance by the steps;
        # samples far past full scale are refused here, before the level step would hide them.
        if bool(torch.isfinite(waveforms).all()):
            peak = float(waveforms.abs().max()) if waveforms.numel() else 0.0
            if peak > MAX_AMPLITUDE:
                raise ValueError(f"samples reach {peak:.3g}, past {MAX_AMPLITUDE:g}; expected audio in about [-1, 1]")
            waveforms, rounding_variance = self.condition(waveforms, lengths)
            return self.logmel(waveforms, lengths, rounding_variance)
        return self.logmel(waveforms, lengths)

    @property
    def needs_statistics(self) -> bool:
        """Whether the training-set statistics (the global norm's, the training colour) are still missing."""
        return not self.norm.initialised or (self.colour is not None and not self.colour.initialised)

    def _loud(self, features: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        return loud_frames(features, frames, self.config.utterance_mean_db)

    @torch.no_grad()
    def accumulate_statistics(self, batches) -> int:
        """Compute the missing training-set statistics from an iterable of ``(waveforms, lengths)``
        batches: the global norm's (over frames) and the training colour (over utterances). Both
        are taken from the log-mel as it comes, before the colour is shrunk.

        Returns:
            int: frames seen.
        """
        norm, colour = not self.norm.initialised, self.colour is not None and not self.colour.initialised
        total = torch.zeros(self.config.n_mels, dtype=torch.float64)
        total_sq = torch.zeros_like(total)
        colour_total = torch.zeros_like(total)
        count = utterances = 0
        for waveforms, lengths in batches:
            features, frames = self._logmel(waveforms.to(self.norm.mean.device), lengths.to(self.norm.mean.device))
            valid = features[lengths_to_mask(frames, features.size(1))].double().cpu()  # (frames, D)
            total += valid.sum(0)
            total_sq += (valid**2).sum(0)
            count += valid.size(0)
            if colour:  # the loud frames' percentile is the costly part: only when the colour is missing
                spoken = frames > 0
                colour_total += loud_mean(features, self._loud(features, frames))[spoken].double().sum(0).cpu()
                utterances += int(spoken.sum())
        if norm:
            self.norm.set_statistics(total, total_sq, count)
        if colour:
            self.colour.set_mean(colour_total, utterances)
        return count

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            waveforms (torch.Tensor): `(B, N)` padded audio at ``config.sample_rate``.
            lengths (torch.Tensor): samples per waveform `(B,)`.

        Returns:
            (torch.Tensor, torch.Tensor): features `(B, T, n_mels)` and frames `(B,)`.
        """
        features, frames = self._logmel(waveforms, lengths)
        loud = self._loud(features, frames) if self.config.utterance_mean or self.colour is not None else None
        if self.colour is not None:
            features = self.colour(features, frames, loud)
        features = self.norm(features, frames)
        if self.config.utterance_mean:
            features = subtract_utterance_mean(features, frames, loud)
        return self.spec_augment(features, frames), frames
