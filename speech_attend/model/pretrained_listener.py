"""A pretrained listener: Whisper's encoder, then a small trainable adapter the speller attends over.

Show, Attend and Tell takes its image encoder pretrained on ImageNet and learns attention on top;
here the listener is Whisper's audio encoder (:mod:`speech_attend.model.whisper`), pretrained on
people speaking, and only an adapter learns: pyramid BLSTM layers (Chan et al. 2016, eq. 5), each
halving the encoder's 50 states a second, so the speller attends over fewer, task-specific states.

    log-mel -> Whisper encoder (frozen, or its top ``trainable_blocks`` training) -> adapter -> states

The frozen part never changes, so its output is a fixed function of the audio: the data module
caches it on disk (:mod:`speech_attend.data.encoder_cache`) and training then runs the adapter and
speller alone, from :meth:`PretrainedListener.adapt`. ``cache_point`` says which output is cached:
the encoder's final states when it is wholly frozen, else the states before its first trainable block.
"""

from __future__ import annotations

import torch
from torch import nn

from speech_attend.model.listener import Listener
from speech_attend.model.whisper import WhisperConfig, WhisperEncoder

__all__ = ["PretrainedListener"]


class PretrainedListener(nn.Module):
    """Whisper's encoder and a pyramid-BLSTM adapter.

    Args:
        encoder (WhisperConfig): the encoder's sizes (its weights come from a converted model).
        hidden (int): adapter BLSTM units per direction; states have ``2 * hidden`` features.
        pyramid_layers (int, optional): adapter layers, each halving time. (Default: ``1``)
        dropout (float, optional): on the adapter's layers. (Default: ``0.0``)
        layer_norm (bool, optional): on the adapter's layers. (Default: ``False``)
        trainable_blocks (int, optional): the encoder's top blocks that train (and its final norm
            with them); 0 keeps it frozen. (Default: ``0``)
        masking (nn.Module or None, optional): SpecAugment-style masks on the encoder's states in
            training (:class:`speech_attend.model.features.SpecAugment`, counted in states of 20 ms),
            before the adapter. (Default: ``None``)

    In training the adapter reads the encoder's states through ``masking`` and dropout, so the
    speller learns from each state's context rather than from the voices of the training corpus.
    """

    def __init__(
        self,
        encoder: WhisperConfig,
        hidden: int,
        pyramid_layers: int = 1,
        dropout: float = 0.0,
        layer_norm: bool = False,
        trainable_blocks: int = 0,
        masking: nn.Module | None = None,
    ):
        super().__init__()
        if not 0 <= trainable_blocks <= encoder.layers:
            raise ValueError(f"trainable_blocks must be in [0, {encoder.layers}] (the encoder's blocks), got {trainable_blocks}")
        self.encoder = WhisperEncoder(encoder)
        self.adapter = Listener(
            encoder.width, hidden, layers=0, pyramid_layers=pyramid_layers, dropout=dropout, layer_norm=layer_norm
        )
        self.masking = nn.Identity() if masking is None else masking
        self.trainable_blocks = trainable_blocks
        self.cache_point = encoder.layers - trainable_blocks  # blocks run before the cached states
        for name, parameter in self.encoder.named_parameters():
            parameter.requires_grad_(self.trains(name))

    def trains(self, name: str) -> bool:
        """Whether the encoder parameter ``name`` is one of the trainable top blocks (or their final norm)."""
        if not self.trainable_blocks:
            return False
        if name.startswith("blocks."):
            return int(name.split(".")[1]) >= self.cache_point
        return name.startswith("ln_post.")

    @property
    def output_dim(self) -> int:
        return self.adapter.output_dim

    @property
    def dropout(self) -> nn.Dropout:
        return self.adapter.dropout

    @property
    def reduction(self) -> int:
        """Input frames (10 ms) per output state: the encoder's 2 times the adapter's pyramid."""
        return 2 * self.adapter.reduction

    def output_lengths(self, frames: torch.Tensor) -> torch.Tensor:
        return self.adapter.output_lengths(self.encoder.output_lengths(frames))

    def frozen_states(self, features: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the frozen part computes, which a cache holds: `(B, ceil(T/2), d)` and lengths `(B,)`."""
        with torch.no_grad():
            x, lengths = self.encoder.stem(features, frames)
            return self.encoder.run_blocks(x, lengths, stop=self.cache_point), lengths

    def adapt(self, cached: torch.Tensor, lengths: torch.Tensor, drop_output: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """From the frozen part's states `(B, L, d)` (:meth:`frozen_states`, or a cache) to the listener's
        states `(B, L / 2^p, 2H)` and their lengths `(B,)`."""
        x = cached.float()
        if self.trainable_blocks:
            x = self.encoder.run_blocks(x, lengths, start=self.cache_point)  # (B, L, d), the final norm included
        if self.training:
            x = self.adapter.dropout(self.masking(x, lengths))
        return self.adapter(x, lengths, drop_output)

    def forward(
        self, features: torch.Tensor, frames: torch.Tensor, drop_output: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            features (torch.Tensor): Whisper log-mel `(B, T, n_mels)`.
            frames (torch.Tensor): `(B,)`.
            drop_output (bool, optional): the adapter's dropout on its output. (Default: ``True``)

        Returns:
            (torch.Tensor, torch.Tensor): states `(B, T', 2H)` (0 at padding) and lengths `(B,)`,
            ``T' = ceil(T / 2) // 2^p``.
        """
        cached, lengths = self.frozen_states(features, frames)
        return self.adapt(cached, lengths, drop_output)
