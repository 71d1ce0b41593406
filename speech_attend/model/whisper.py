"""Whisper's audio encoder (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak
Supervision", section 2.2 and Figure 1), a listener pretrained on 680,000 hours of people speaking.

    waveform (16 kHz) -> log-mel (80 bands, 25 ms window, 10 ms hop; WhisperLogMel)
        -> conv1d(k 3) + GELU -> conv1d(k 3, stride 2) + GELU        (50 states a second)
        -> + sinusoidal positions
        -> N pre-norm residual blocks: x + MHA(LN(x)), then x + MLP(LN(x))
        -> LayerNorm                                                  -> states `(B, T/2, d)`

Whisper saw every input padded or cut to 30 s (3,000 frames, 1,500 states). Here an utterance
is encoded at its own length, its padding masked out of every attention and convolution, so a
clip in a batch gives the states it gives alone (``python -m scripts.benchmarks.short_inputs``
measures this choice against padding to 30 s). Its layers are named as in Whisper's ``model.py``;
the weights come from a converted CTranslate2 model (:mod:`speech_attend.model.whisper_weights`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torchaudio.functional import melscale_fbanks

from shared import MultiHeadAttention, lengths_to_mask

__all__ = ["WhisperConfig", "WhisperLogMel", "WhisperEncoder", "sinusoids"]

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
DYNAMIC_RANGE = 8.0  # log10 units kept under each clip's loudest bin (80 dB)


@dataclass(frozen=True)
class WhisperConfig:
    """Sizes of a Whisper encoder (tiny: 384 wide, 6 heads, 4 blocks)."""

    n_mels: int = 80  # log-mel bands of its front end
    width: int = 384  # d_model: states have this many features
    heads: int = 6  # attention heads per block
    layers: int = 4  # residual blocks
    positions: int = 1500  # rows of the position table: 30 s at 50 states a second

    def __post_init__(self):
        if min(self.n_mels, self.width, self.heads, self.layers, self.positions) < 1 or self.width % self.heads:
            raise ValueError(f"a Whisper encoder needs positive sizes and heads dividing width, got {self}")


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """The fixed position table `(length, channels)`: sines then cosines at geometric timescales
    from 1 to ``max_timescale`` (Vaswani et al. 2017, section 3.5, halves concatenated)."""
    if channels % 2:
        raise ValueError(f"sinusoids need an even number of channels, got {channels}")
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inverse = torch.exp(-increment * torch.arange(channels // 2, dtype=torch.float64))  # (C/2,)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inverse[None, :]  # (length, C/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()


class WhisperLogMel(nn.Module):
    """Whisper's front end: ``log10`` mel power, each clip's range cut 80 dB under its loudest bin, scaled.

        x = log10(max(mel(|STFT|^2), 1e-10));   x = max(x, max_clip(x) - 8);   x = (x + 4) / 4

    The STFT is centred (each clip reflected at its start) and a clip is followed by silence, as
    Whisper's own feature code pads it; ``N`` samples give ``N // 160`` frames, and a clip's frames
    do not depend on the others in its batch.
    """

    win, hop, sample_rate = N_FFT, HOP, SAMPLE_RATE
    needs_statistics = False  # fixed scaling: no training-set statistics
    colour = None

    def __init__(self, n_mels: int = 80):
        super().__init__()
        self.n_mels = n_mels
        self.register_buffer("window", torch.hann_window(N_FFT), persistent=False)
        filters = melscale_fbanks(N_FFT // 2 + 1, 0.0, SAMPLE_RATE / 2, n_mels, SAMPLE_RATE, norm="slaney", mel_scale="slaney")
        self.register_buffer("filters", filters, persistent=False)  # (F, n_mels)

    @property
    def frame_seconds(self) -> float:
        return HOP / SAMPLE_RATE

    def num_frames(self, num_samples: torch.Tensor) -> torch.Tensor:
        return torch.div(num_samples, HOP, rounding_mode="floor")

    def forward(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            waveforms (torch.Tensor): `(B, N)` at 16 kHz, zero-padded.
            lengths (torch.Tensor): samples per clip `(B,)`.

        Returns:
            (torch.Tensor, torch.Tensor): features `(B, T, n_mels)` (0 past each clip's frames) and frames `(B,)`.
        """
        if not bool(torch.isfinite(waveforms).all()):
            raise ValueError("the audio holds NaN or infinite samples; expected finite audio in about [-1, 1]")
        frames = self.num_frames(lengths)
        steps = int(frames.max())
        half = N_FFT // 2
        starts = torch.stack([waveforms[b, 1 : half + 1].flip(0) for b in range(waveforms.size(0))])  # (B, 200): reflection
        silence = waveforms.new_zeros(waveforms.size(0), max(0, steps * HOP + half - waveforms.size(1)))
        audio = torch.cat([starts, waveforms * lengths_to_mask(lengths, waveforms.size(1)), silence], dim=1)
        spectrum = torch.stft(audio.float(), N_FFT, HOP, window=self.window, center=False, return_complex=True)  # (B, F, T+)
        power = spectrum[..., :steps].abs().square()  # (B, F, T)
        mel = torch.matmul(power.transpose(1, 2), self.filters)  # (B, T, n_mels)
        log_mel = mel.clamp_min(1e-10).log10()
        valid = lengths_to_mask(frames, steps)[..., None]  # (B, T, 1)
        loudest = log_mel.masked_fill(~valid, float("-inf")).amax(dim=(1, 2), keepdim=True)  # (B, 1, 1)
        log_mel = torch.maximum(log_mel, loudest - DYNAMIC_RANGE)
        return ((log_mel + 4.0) / 4.0).masked_fill(~valid, 0.0), frames


class ResidualAttentionBlock(nn.Module):
    """``x + MHA(LN(x))``, then ``x + MLP(LN(x))`` with a 4x GELU MLP (pre-norm Transformer)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.attn_ln = nn.LayerNorm(width)
        self.attn = MultiHeadAttention(width, heads, key_bias=False)
        self.mlp_ln = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``x`` `(B, T, d)`, ``mask`` bool `(B, 1, T)` of real states -> `(B, T, d)`."""
        normed = self.attn_ln(x)
        x = x + self.attn(normed, normed, mask=mask, need_weights=False)[0]
        return x + self.mlp(self.mlp_ln(x))


class WhisperEncoder(nn.Module):
    """Whisper's audio encoder over log-mel features.

    Args:
        config (WhisperConfig): its sizes.

    ``forward`` runs it whole; :meth:`stem` and :meth:`run_blocks` run it in two parts, so the
    frozen lower blocks' states can be cached and the top blocks trained on them.
    """

    def __init__(self, config: WhisperConfig):
        super().__init__()
        self.config = config
        self.conv1 = nn.Conv1d(config.n_mels, config.width, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(config.width, config.width, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(config.positions, config.width), persistent=False)
        self.blocks = nn.ModuleList(ResidualAttentionBlock(config.width, config.heads) for _ in range(config.layers))
        self.ln_post = nn.LayerNorm(config.width)

    @property
    def max_frames(self) -> int:
        """Longest input in 10 ms frames (30 s)."""
        return 2 * self.config.positions

    @staticmethod
    def output_lengths(frames: torch.Tensor) -> torch.Tensor:
        """States for ``frames`` input frames: the stride-2 convolution's ``ceil(T / 2)``."""
        return torch.div(frames + 1, 2, rounding_mode="floor")

    def stem(self, features: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The two convolutions and the positions: features `(B, T, n_mels)` -> `(B, ceil(T/2), d)`, lengths `(B,)`.

        Each convolution reads zeros past its clip's last frame, as over a clip alone.
        """
        if features.size(1) > self.max_frames:
            raise ValueError(f"Whisper's encoder takes at most {self.max_frames} frames (30 s), got {features.size(1)}")
        x = features.transpose(1, 2) * lengths_to_mask(frames, features.size(1))[:, None, :].to(features.dtype)  # (B, n_mels, T)
        x = F.gelu(self.conv1(x)) * lengths_to_mask(frames, x.size(2))[:, None, :].to(x.dtype)  # (B, d, T)
        x = F.gelu(self.conv2(x)).transpose(1, 2)  # (B, T/2, d)
        return x + self.positional_embedding[: x.size(1)].to(x.dtype), self.output_lengths(frames)

    def run_blocks(self, x: torch.Tensor, lengths: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Blocks ``start`` to ``stop`` (the last by default), then the final norm if the last ran:
        `(B, L, d)` -> `(B, L, d)`, 0 past ``lengths``."""
        stop = len(self.blocks) if stop is None else stop
        valid = lengths_to_mask(lengths, x.size(1))  # (B, L)
        for block in self.blocks[start:stop]:
            x = block(x, valid[:, None, :])
        if stop == len(self.blocks):
            x = self.ln_post(x)
        return x * valid[..., None].to(x.dtype)

    def forward(self, features: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            features (torch.Tensor): log-mel `(B, T, n_mels)` from :class:`WhisperLogMel`, `T <= 3000`.
            frames (torch.Tensor): valid frames `(B,)`.

        Returns:
            (torch.Tensor, torch.Tensor): states `(B, ceil(T/2), d)` (0 at padding) and their lengths `(B,)`.
        """
        x, lengths = self.stem(features, frames)
        return self.run_blocks(x, lengths), lengths
