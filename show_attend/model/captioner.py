"""Show, Attend and Tell (Xu et al., ICML 2015, arXiv 1502.03044) as one plain ``nn.Module``.

    image -> Encoder (CNN grid: annotation vectors a_1..a_L) -> Decoder (attention LSTM) -> words

:class:`Captioner` holds the encoder (:mod:`show_attend.model.encoder`), the decoder
(:mod:`show_attend.model.decoder`) and the vocabulary; it scores a caption given the image
(teacher-forced, for training and for ``explain``) and writes captions by batched beam search
(:func:`shared.beam_search`). Training (the loss, REINFORCE, the optimiser) is
:mod:`show_attend.train.module`'s; captioning files is :mod:`show_attend.infer.caption`'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import torch
from torch import nn

from shared import Hypothesis, Vocabulary, beam_search
from shared.io.config import as_dataclass
from show_attend.model.decoder import Decoder, DecoderConfig, DecoderOutput, DecoderScores
from show_attend.model.encoder import Encoder, EncoderConfig

__all__ = ["CaptionerConfig", "Captioner"]


@dataclass(frozen=True)
class CaptionerConfig:
    """Everything that defines a captioner, besides its vocabulary and weights (frozen, as the
    recognizer's configs are: a changed setting is a new config, :func:`dataclasses.replace`)."""

    encoder: EncoderConfig = field(default_factory=EncoderConfig)  # backbone, weights, grid, fine-tuning
    decoder: DecoderConfig = field(default_factory=DecoderConfig)  # sizes, gate, soft or hard attention
    image_size: int = 224  # images are resized to image_size x image_size pixels
    beam_size: int = 5  # beams when writing a caption
    max_decode_length: int = 50  # most words of a written caption
    length_penalty: float = 0.0  # alpha of the beam search's length normalisation
    max_repeats: int | None = (
        4  # a caption with one word this many times in a row can only end (twice what captions repeat); None = off
    )

    def __post_init__(self):
        object.__setattr__(self, "encoder", as_dataclass(EncoderConfig, self.encoder))  # a saved dict becomes its config
        object.__setattr__(self, "decoder", as_dataclass(DecoderConfig, self.decoder))
        if self.beam_size < 1 or self.max_decode_length < 1:
            raise ValueError(f"beam_size and max_decode_length must be >= 1, got {self.beam_size} and {self.max_decode_length}")
        if self.max_repeats is not None and self.max_repeats < 2:
            raise ValueError(f"max_repeats must be None or at least 2 (words in a row), got {self.max_repeats}")

    @classmethod
    def from_hyper_parameters(cls, hparams: dict) -> CaptionerConfig:
        """The config within a checkpoint's (or an export's) hyper-parameters."""
        return cls(**{f.name: hparams[f.name] for f in fields(cls) if f.name in hparams})

    def to_dict(self) -> dict:
        return asdict(self)


class Captioner(nn.Module):
    """Encoder, decoder and vocabulary: images in, captions out.

    Args:
        config (CaptionerConfig): the architecture and decoding settings.
        vocabulary (Vocabulary): the words, specials included.
    """

    def __init__(self, config: CaptionerConfig, vocabulary: Vocabulary):
        super().__init__()
        self.config, self.vocabulary = config, vocabulary
        self.encoder = Encoder(config.encoder)
        self.decoder = Decoder(config.decoder, len(vocabulary), self.encoder.feature_dim)

    @property
    def grid(self) -> tuple[int, int]:
        """Rows and columns of the attention grid."""
        return self.encoder.grid

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Annotation vectors `(B, L, D)` of normalised images `(B, 3, S, S)`."""
        return self.encoder(images)

    def forward(
        self, features: torch.Tensor, inputs: torch.Tensor, lengths: torch.Tensor | None = None, sample: bool = False
    ) -> DecoderOutput:
        """Teacher-forced pass: the decoder reads the caption's words and predicts the next ones.

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.
            inputs (torch.Tensor): input words `(B, T)`, ``<sos>`` first.
            lengths (torch.Tensor or None, optional): words to predict per caption `(B,)`; with
                them only the real steps run (see :meth:`Decoder.forward`). (Default: ``None``)
            sample (bool, optional): hard attention reads sampled locations. (Default: ``False``)

        Returns:
            DecoderOutput: logits `(B, T, V)` and weights `(B, T, L)` (and the samples'
            log-probabilities), 0 at padded steps.
        """
        return self.decoder(features, inputs, lengths, sample)

    def score(
        self, features: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor | None = None, sample: bool = False
    ) -> DecoderScores:
        """Each given word's log-probability given the image and the words before it (:meth:`Decoder.score`).

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.
            tokens (torch.Tensor): ``<sos> y_1 .. y_T`` `(B, T + 1)`.
            lengths (torch.Tensor or None, optional): words to score per caption `(B,)`; ``None``: all ``T``.
            sample (bool, optional): hard attention reads sampled locations. (Default: ``False``)

        Returns:
            DecoderScores: log-probabilities `(B, T)`, weights `(B, T, L)` (and the samples'
            log-probabilities), 0 at padded steps.
        """
        return self.decoder.score(features, tokens, lengths, sample)

    @torch.no_grad()
    def generate(self, features: torch.Tensor, beam_size: int | None = None, max_length: int | None = None) -> list[Hypothesis]:
        """Best caption of each image by batched beam search (the expected context, for both
        soft and hard attention).

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.
            beam_size (int or None): beams; the config's when ``None``.
            max_length (int or None): most words; the config's ``max_decode_length`` when ``None``.

        Returns:
            list of Hypothesis: one per image, at most ``max_length`` words; ``attention`` is
            `(len(tokens), L)`.
        """
        return [hyps[0] for hyps in self.generate_nbest(features, 1, beam_size, max_length)]

    @torch.no_grad()
    def generate_nbest(
        self,
        features: torch.Tensor,
        nbest: int,
        beam_size: int | None = None,
        max_length: int | None = None,
    ) -> list[list[Hypothesis]]:
        """The ``nbest`` best captions of each image from one batched beam search, best first
        (the first is :meth:`generate`'s).

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.
            nbest (int): captions per image, at most the beam size (fewer when fewer ended).
            beam_size (int or None): beams; the config's when ``None``.
            max_length (int or None): most words; the config's ``max_decode_length`` when ``None``.

        Returns:
            list of list of Hypothesis: per image, its captions ranked by length-normalised
            score; each ``attention`` is `(len(tokens), L)`.
        """
        beam_size = beam_size or self.config.beam_size
        max_length = max_length or self.config.max_decode_length
        memory, state = self.decoder.start(features)  # one memory row serves the K beams of an image
        vocabulary = self.vocabulary
        return beam_search(
            self.decoder.step,
            state,
            features.size(0),
            beam_size,
            vocabulary.sos_id,
            vocabulary.eos_id,
            max_length + 1,
            length_penalty=self.config.length_penalty,
            nbest=nbest,
            memory=memory,
            must_end=True,
            max_repeats=self.config.max_repeats,
            never=vocabulary.never_written,
        )  # max_length words, then a step that can only end the caption
