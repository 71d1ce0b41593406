"""Show, Attend and Tell (Xu et al., ICML 2015, arXiv 1502.03044) as one plain ``nn.Module``.

    image -> Encoder (CNN grid: annotation vectors a_1..a_L) -> Decoder (attention LSTM) -> words

:class:`Captioner` holds the encoder (:mod:`show_attend.model.encoder`), the decoder
(:mod:`show_attend.model.decoder`), the vocabulary and its decoding settings; it scores a caption
given the image (teacher-forced, for training and for ``explain``) and searches for captions by
batched beam search (:func:`shared.beam_search`): :meth:`Captioner.encode` the images,
:meth:`Captioner.search` from their features, or both at once, :meth:`Captioner.decode`, as the
recognizer's :class:`speech_attend.model.las.LAS` does. :func:`build_captioner` builds one from
saved hyper-parameters. Training (the loss, REINFORCE, the optimiser) is
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
from show_attend.model.migrations import migrate_hyper_parameters

__all__ = ["CaptionerConfig", "DecodeConfig", "Captioner", "build_captioner"]


@dataclass(frozen=True)
class CaptionerConfig:
    """The captioner's network, besides its vocabulary and weights (frozen, as the recognizer's
    configs are: a changed setting is a new config, :func:`dataclasses.replace`). Its fields are
    saved side by side at the top of the hyper-parameters (``encoder``, ``decoder``, ``image_size``),
    beside ``decoding``: one level deep, as every config a model saves (:mod:`shared.io.config`)."""

    encoder: EncoderConfig = field(default_factory=EncoderConfig)  # backbone, weights, grid, fine-tuning
    decoder: DecoderConfig = field(default_factory=DecoderConfig)  # sizes, gate, soft or hard attention
    image_size: int = 224  # images are resized to image_size x image_size pixels

    def __post_init__(self):
        object.__setattr__(self, "encoder", as_dataclass(EncoderConfig, self.encoder))  # a saved dict becomes its config
        object.__setattr__(self, "decoder", as_dataclass(DecoderConfig, self.decoder))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DecodeConfig:
    """How validation, test and ``caption`` search for the caption."""

    beam_size: int = 5  # beams
    max_length: int = 50  # most words of a caption
    length_penalty: float = 0.0  # alpha of the beam search's length normalisation
    max_repeats: int | None = (
        4  # a caption with one word this many times in a row can only end (twice what captions repeat); None = off
    )

    def __post_init__(self):
        if self.beam_size < 1 or self.max_length < 1:
            raise ValueError(f"decoding.beam_size and max_length must be >= 1, got {self.beam_size} and {self.max_length}")
        if self.max_repeats is not None and self.max_repeats < 2:
            raise ValueError(f"decoding.max_repeats must be None or at least 2 (words in a row), got {self.max_repeats}")


class Captioner(nn.Module):
    """Encoder, decoder and vocabulary: images in, captions out, with its decoding settings (as
    :class:`speech_attend.model.las.LAS` has its own).

    Args:
        config (CaptionerConfig): the network.
        vocabulary (Vocabulary): the words, specials included.
        decoding (DecodeConfig, optional): how :meth:`search` searches unless told otherwise. (Default: ``DecodeConfig()``)
    """

    def __init__(self, config: CaptionerConfig, vocabulary: Vocabulary, decoding: DecodeConfig = DecodeConfig()):
        super().__init__()
        self.config, self.vocabulary, self.decoding = config, vocabulary, decoding
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
    def decode(
        self, images: torch.Tensor, decoding: DecodeConfig | None = None, beam_size: int | None = None
    ) -> list[Hypothesis]:
        """Caption a batch of images: :meth:`encode`, then :meth:`search`.

        Args:
            images (torch.Tensor): normalised images `(B, 3, S, S)`.
            decoding, beam_size: as :meth:`search` takes them.

        Returns:
            list of Hypothesis: the best caption of each image.
        """
        return self.search(self.encode(images), decoding, beam_size)

    @torch.no_grad()
    def search(
        self, features: torch.Tensor, decoding: DecodeConfig | None = None, beam_size: int | None = None
    ) -> list[Hypothesis]:
        """The best caption of each image by batched beam search (the expected context, for both
        soft and hard attention).

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)` (from :meth:`encode`).
            decoding (DecodeConfig or None, optional): search settings; ``None``: the model's own (``decoding``).
            beam_size (int or None, optional): overrides ``decoding.beam_size``.

        Returns:
            list of Hypothesis: one per image, at most ``decoding.max_length`` words; ``attention``
            is `(len(tokens), L)`.
        """
        return [hyps[0] for hyps in self.search_nbest(features, 1, decoding, beam_size)]

    @torch.no_grad()
    def search_nbest(
        self, features: torch.Tensor, nbest: int, decoding: DecodeConfig | None = None, beam_size: int | None = None
    ) -> list[list[Hypothesis]]:
        """The ``nbest`` best captions of each image from one batched beam search, best first
        (the first is :meth:`search`'s).

        Args:
            features (torch.Tensor): annotation vectors `(B, L, D)`.
            nbest (int): captions per image, at most the beam size (fewer when fewer ended).
            decoding, beam_size: as :meth:`search` takes them.

        Returns:
            list of list of Hypothesis: per image, its captions ranked by length-normalised
            score; each ``attention`` is `(len(tokens), L)`.
        """
        decoding = self.decoding if decoding is None else decoding
        memory, state = self.decoder.start(features)  # one memory row serves the K beams of an image
        vocabulary = self.vocabulary
        return beam_search(
            self.decoder.step,
            state,
            features.size(0),
            decoding.beam_size if beam_size is None else beam_size,
            vocabulary.sos_id,
            vocabulary.eos_id,
            decoding.max_length + 1,
            length_penalty=decoding.length_penalty,
            nbest=nbest,
            memory=memory,
            must_end=True,
            max_repeats=decoding.max_repeats,
            never=vocabulary.never_written,
        )  # max_length words, then a step that can only end the caption


def build_captioner(hparams: dict) -> Captioner:
    """The model (untrained) that saved hyper-parameters describe, with its vocabulary and decoding settings.

    Args:
        hparams (dict): a checkpoint's ``hyper_parameters`` or an exported ``config.json``'s, of
            any layout this code saved (:mod:`show_attend.model.migrations`).

    Raises:
        ValueError: no vocabulary, or settings these classes do not know.
    """
    if not hparams.get("vocabulary"):
        raise ValueError("the model config has no vocabulary; was it saved by show-attend?")
    hparams = migrate_hyper_parameters(hparams)  # an older layout read as today's
    config = CaptionerConfig(**{f.name: hparams[f.name] for f in fields(CaptionerConfig) if f.name in hparams})
    return Captioner(config, Vocabulary(hparams["vocabulary"]), as_dataclass(DecodeConfig, hparams.get("decoding")))
