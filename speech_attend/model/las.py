"""Listen, Attend and Spell (Chan et al., ICASSP 2016) with a joint CTC head (Kim et al. 2017).

    waveform -> log-mel -> Listener (BLSTM + pyramid, 8x shorter) -> Speller (attention) -> characters
                                      `-> CTC head (optional): a second, monotonic view of the same states

With ``listener: pretrained`` the listener is Whisper's encoder, pretrained on people speaking, with
a small pyramid-BLSTM adapter on top (:mod:`speech_attend.model.pretrained_listener`), and the front
end is the log-mel Whisper was trained with (:class:`speech_attend.model.whisper.WhisperLogMel`).

The CTC head trains the listener to put each character at its own frames, which helps the
attention find its alignment early; at decoding time it rescores the beam's n-best list.
Characters come at ~15 per second and an 8x listener gives 12.5 frames per second, fewer than
CTC needs, so the head emits ``ctc_upsample`` label slots per listener frame
(Libovicky & Helcl 2018).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from shared import Hypothesis, Vocabulary, beam_search
from shared.beam_search import length_normalized
from shared.io.config import as_dataclass
from shared.io.model_files import fingerprint
from speech_attend.model.features import FeatureConfig, FeatureFrontend, SpecAugment
from speech_attend.model.listener import Listener
from speech_attend.model.lm import CharLM, Scorer, WeightedScorers, length_bonus_scorer, lm_scorer
from speech_attend.model.migrations import migrate_hyper_parameters
from speech_attend.model.pretrained_listener import PretrainedListener
from speech_attend.model.speller import Speller, SpellerConfig
from speech_attend.model.whisper import WhisperConfig, WhisperLogMel

__all__ = ["LASConfig", "DecodeConfig", "LAS", "AudioTooShortError", "native_cpu_kernels", "build_recognizer"]


@contextmanager
def native_cpu_kernels():
    """Run without oneDNN and NNPACK. oneDNN compiles a new LSTM/convolution kernel for every new
    sequence length, which costs seconds per batch when lengths vary. NNPACK, which PyTorch picks
    for a convolution over 16 rows or more with a kernel under 17, runs the location filter of a
    batched beam search many times slower than the native kernel. Both measured in
    docs/BENCHMARKS.md. CPU-only; GPUs are unaffected."""
    mkldnn = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        with torch.backends.nnpack.flags(enabled=False):
            yield
    finally:
        torch.backends.mkldnn.enabled = mkldnn


class AudioTooShortError(ValueError):
    """An utterance gives no listener frame after the time reduction."""


LISTENERS = ("pblstm", "pretrained")


@dataclass(frozen=True)
class LASConfig:
    """Architecture of the recognizer (the feature settings are :class:`FeatureConfig`, the search's
    :class:`DecodeConfig`). One level deep, as every config a model saves (:mod:`shared.io.config`):
    the listener's, the pretrained encoder's and the speller's fields side by side, named by their
    part; :attr:`encoder` and :attr:`speller` are those parts' own configs, read from them."""

    listener: str = (
        "pblstm"  # pblstm (Chan et al., from log-mel) or pretrained (Whisper's encoder, then the pyramid as its adapter)
    )
    listener_hidden: int = 256  # BLSTM units per direction; listener states have twice this
    listener_layers: int = 1  # plain BLSTM layers before the pyramid (pblstm only)
    pyramid_layers: int = 3  # each halves time: 3 layers = 8x (Chan et al.)
    input_stack: int = 1  # frames concatenated before the first BLSTM (extra reduction, CPU configs; pblstm only)
    layer_norm: bool = False  # layer norm on each listener layer's output (faster convergence)
    # The pretrained listener's encoder (Whisper tiny's sizes); its weights come from `speech-attend prepare whisper`.
    encoder_width: int = WhisperConfig.width  # d_model of the encoder
    encoder_heads: int = WhisperConfig.heads  # its attention heads
    encoder_layers: int = WhisperConfig.layers  # its residual blocks
    trainable_blocks: int = 0  # its top blocks that train with the speller (0: frozen, its states can be cached)
    # The speller's fields, with its defaults (SpellerConfig's); ``speller`` gathers them.
    speller_hidden: int = SpellerConfig.hidden  # speller LSTM units
    speller_layers: int = SpellerConfig.layers  # stacked speller LSTM layers
    embedding_dim: int = SpellerConfig.embedding_dim  # character embedding
    attention: str = (
        SpellerConfig.attention
    )  # location (Chorowski et al. 2015), additive, dot, scaled_dot, or none (one fixed vector)
    attention_dim: int = SpellerConfig.attention_dim  # hidden size of the MLP scores
    location_filters: int = SpellerConfig.location_filters  # channels of the convolution over the previous alignment
    location_kernel: int = SpellerConfig.location_kernel  # its (odd) width, in listener frames
    dropout: float = SpellerConfig.dropout  # between LSTM layers (listener and speller) and before the output MLP
    ctc_upsample: int = 2  # CTC label slots per listener frame; 0 = no CTC head
    summary: str = SpellerConfig.summary  # with attention none: "mean" of the listener states, or "last" of each direction

    def __post_init__(self):
        if self.listener not in LISTENERS:
            raise ValueError(f"las.listener must be one of {', '.join(LISTENERS)}, got {self.listener!r}")

    @property
    def encoder(self) -> WhisperConfig:
        """The pretrained listener's encoder sizes."""
        return WhisperConfig(width=self.encoder_width, heads=self.encoder_heads, layers=self.encoder_layers)

    @property
    def speller(self) -> SpellerConfig:
        return SpellerConfig(
            hidden=self.speller_hidden,
            layers=self.speller_layers,
            embedding_dim=self.embedding_dim,
            attention=self.attention,
            attention_dim=self.attention_dim,
            location_filters=self.location_filters,
            location_kernel=self.location_kernel,
            dropout=self.dropout,
            summary=self.summary,
        )


@dataclass(frozen=True)
class DecodeConfig:
    """How validation, test and ``transcribe`` search for the transcript."""

    beam_size: int = 8  # beams for test and transcribe
    val_beam_size: int = 4  # beams for validation during training (1 = greedy, fastest)
    length_penalty: float = 1.0  # rank by score / (length + 1) ** alpha; 1 = mean log-probability
    ctc_weight: float = 0.3  # weight of the CTC score when rescoring the n-best list (0 = off)
    max_len_ratio: float = 2.5  # at most this many characters per listener frame (end detection)
    max_chunk_seconds: float | None = None  # transcribe splits longer audio; None: set by fit to the longest training utterance
    lm_weight: float = 0.0  # weight of a language model's log-probability in the beam (shallow fusion; 0 = off), in [0, 2]
    length_bonus: float = (
        0.0  # added to the score for each character, offsetting the language model's preference for short outputs
    )
    max_repeats: int | None = (
        6  # a hypothesis with one character this many times in a row can only end (twice the longest run of one letter in English); None = off
    )
    lm_bfloat16: bool = False  # run the language model in bfloat16 where the CPU multiplies it natively (lm.bfloat16_is_fast); same WERs, docs/BENCHMARKS.md

    def __post_init__(self):
        if self.max_repeats is not None and self.max_repeats < 2:
            raise ValueError(f"decoding.max_repeats must be None or at least 2 (characters in a row), got {self.max_repeats}")


class LAS(nn.Module):
    """The recognizer: front end, listener, speller and optional CTC head, with its vocabulary
    and decoding settings (as :class:`show_attend.model.captioner.Captioner` has its own).

    Args:
        config (LASConfig): architecture.
        features (FeatureConfig): front-end settings.
        vocabulary (Vocabulary): the characters, specials included; the CTC blank is ``<pad>`` (id 0).
        decoding (DecodeConfig, optional): how :meth:`search` searches unless told otherwise. (Default: ``DecodeConfig()``)
    """

    blank_id = 0

    def __init__(
        self, config: LASConfig, features: FeatureConfig, vocabulary: Vocabulary, decoding: DecodeConfig = DecodeConfig()
    ):
        super().__init__()
        if not isinstance(vocabulary, Vocabulary):
            raise ValueError(f"LAS takes its Vocabulary (the characters, specials included), got {type(vocabulary).__name__}")
        self.config, self.vocabulary, self.decoding = config, vocabulary, decoding
        vocab_size = len(vocabulary)
        if config.listener == "pretrained":
            if features.sample_rate != WhisperLogMel.sample_rate:
                raise ValueError(
                    f"the pretrained listener hears {WhisperLogMel.sample_rate} Hz audio; features.sample_rate is {features.sample_rate}"
                )
            self.frontend = WhisperLogMel(config.encoder.n_mels)
            self.listener = PretrainedListener(
                config.encoder,
                config.listener_hidden,
                config.pyramid_layers,
                config.dropout,
                config.layer_norm,
                config.trainable_blocks,
                masking=SpecAugment(features),
            )
        else:
            self.frontend = FeatureFrontend(features)
            self.listener = Listener(
                features.n_mels,
                config.listener_hidden,
                config.listener_layers,
                config.pyramid_layers,
                config.input_stack,
                config.dropout,
                config.layer_norm,
            )
        self.speller = Speller(vocab_size, self.listener.output_dim, config.speller)
        self.ctc_head = nn.Linear(self.listener.output_dim, vocab_size * config.ctc_upsample) if config.ctc_upsample else None
        self.vocab_size = vocab_size
        self._open_forget_gates()

    def _open_forget_gates(self) -> None:
        """The listener's forget-gate biases start at 1 (Jozefowicz et al. 2015): memories last from
        the first step (the speller opens its own)."""
        for module in self.modules():
            if isinstance(module, nn.LSTM):
                for name, bias in module.named_parameters():
                    if name.startswith("bias_"):  # gates are ordered input, forget, cell, output
                        hidden = bias.numel() // 4
                        with torch.no_grad():
                            bias[hidden : 2 * hidden].fill_(1.0 if name.startswith("bias_ih") else 0.0)

    @property
    def frame_seconds(self) -> float:
        """Seconds of audio per listener frame."""
        return self.frontend.frame_seconds * self.listener.reduction

    @property
    def sample_rate(self) -> int:
        """Hz of the audio the model hears."""
        return self.frontend.sample_rate

    @property
    def pretrained(self) -> bool:
        """Whether the listener is a pretrained encoder with an adapter."""
        return isinstance(self.listener, PretrainedListener)

    def min_samples(self) -> int:
        """Shortest waveform that gives one listener frame."""
        logmel = self.frontend if self.pretrained else self.frontend.logmel
        return logmel.win + logmel.hop * (self.listener.reduction - 1)

    def encode(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        drop_output: bool = True,
        cached: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Args:
            waveforms (torch.Tensor): `(B, N)` padded audio.
            lengths (torch.Tensor): samples per waveform `(B,)`.
            drop_output (bool, optional): the listener's dropout on its states (training only).
                (Default: ``True``)
            cached (tuple or None, optional): the pretrained listener's frozen states of this
                audio `(B, L, d)` and their lengths `(B,)`, from a cache; the audio is then not
                read. (Default: ``None``)

        Returns:
            (torch.Tensor, torch.Tensor): listener states `(B, L, 2H)` and lengths `(B,)`.

        Raises:
            AudioTooShortError: an utterance is shorter than one listener frame.
        """
        if cached is not None:
            if not self.pretrained:
                raise ValueError("cached encoder states need the pretrained listener (las.listener: pretrained)")
            return self.listener.adapt(*cached, drop_output)
        short = lengths < self.min_samples()
        if short.any():
            raise AudioTooShortError(
                f"audio of {int(lengths[short].min())} samples is shorter than one listener frame; "
                f"expected at least {self.min_samples()} samples ({self.min_samples() / self.sample_rate:.3f} s)"
            )
        features, frames = self.frontend(waveforms, lengths)  # (B, T, n_mels)
        if torch.is_grad_enabled():  # training: oneDNN's LSTM, much faster forwards and backwards
            return self.listener(features, frames, drop_output)  # (B, L, 2H), (B,)
        with native_cpu_kernels():  # decoding runs packed sequences, which oneDNN does not take
            return self.listener(features, frames, drop_output)

    @torch.no_grad()
    def frozen_states(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The pretrained listener's frozen part on this audio, what a cache of its states holds:
        `(B, L, d)` and lengths `(B,)` (:meth:`encode` takes them back as ``cached``)."""
        if not self.pretrained:
            raise ValueError("only the pretrained listener has frozen states to cache (las.listener: pretrained)")
        return self.listener.frozen_states(*self.frontend(waveforms, lengths))

    def frozen_key(self) -> dict:
        """What :meth:`frozen_states` depends on: the frozen weights, where the frozen part ends, the front end."""
        encoder = self.listener.encoder
        frozen = {name: p for name, p in encoder.state_dict().items() if not self.listener.trains(name)}
        return {"encoder": fingerprint(frozen), "cache_point": self.listener.cache_point, "frontend": "whisper-log-mel/1"}

    def ctc_log_probs(self, states: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """CTC log-probabilities `(B, L * u, V)` and their lengths `(B,)` (``u = ctc_upsample``)."""
        if self.ctc_head is None:
            raise ValueError("this model has no CTC head (ctc_upsample: 0)")
        batch, steps, _ = states.shape
        logits = self.ctc_head(states).view(batch, steps * self.config.ctc_upsample, self.vocab_size)
        return logits.float().log_softmax(-1), lengths * self.config.ctc_upsample

    def forward(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        inputs: torch.Tensor,
        sampling_probability: float = 0.0,
        cached: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> dict[str, torch.Tensor]:
        """Teacher-forced pass for training.

        Args:
            waveforms (torch.Tensor): `(B, N)`.
            lengths (torch.Tensor): `(B,)`.
            inputs (torch.Tensor): speller inputs ``<sos> y_1 .. y_{U-1}`` `(B, U)`.
            sampling_probability (float, optional): scheduled sampling: the chance that a step reads
                the model's own previous prediction instead of the true character. (Default: ``0.0``)
            cached (tuple or None, optional): cached encoder states, as :meth:`encode` takes them.

        Returns:
            dict: ``logits`` `(B, U, V)`, ``alignments`` `(B, U, L)`, the listener's ``states``
            before its dropout `(B, L, D)`, ``encoder_lengths`` `(B,)`, and, with a CTC head,
            ``ctc_log_probs`` `(B, L*u, V)` and ``ctc_lengths`` `(B,)`.
        """
        undropped, encoder_lengths = self.encode(waveforms, lengths, drop_output=False, cached=cached)
        states = self.listener.dropout(undropped)
        logits, alignments = self.speller(states, encoder_lengths, inputs, sampling_probability)
        out = {"logits": logits, "alignments": alignments, "states": undropped, "encoder_lengths": encoder_lengths}
        if self.ctc_head is not None:
            out["ctc_log_probs"], out["ctc_lengths"] = self.ctc_log_probs(states, encoder_lengths)
        return out

    @torch.no_grad()
    def score(
        self, states: torch.Tensor, encoder_lengths: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The speller's log-probability of each given character, and its attention (:meth:`Speller.score`).

        Args:
            states (torch.Tensor): listener states `(B, L, D)` (from :meth:`encode`).
            encoder_lengths (torch.Tensor): `(B,)`.
            tokens (torch.Tensor): ``<sos> y_1 .. y_U`` `(B, U + 1)`.
            lengths (torch.Tensor or None, optional): characters per sequence `(B,)`; ``None``: all ``U``.

        Returns:
            (torch.Tensor, torch.Tensor): `(B, U)` and `(B, U, L)`, 0 past ``lengths``.
        """
        with native_cpu_kernels():
            return self.speller.score(states, encoder_lengths, tokens, lengths)

    @torch.no_grad()
    def decode(
        self,
        waveforms: torch.Tensor,
        lengths: torch.Tensor,
        decoding: DecodeConfig | None = None,
        beam_size: int | None = None,
        ctc_posteriors: list | None = None,
        lm: CharLM | None = None,
        cached: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[list[Hypothesis], torch.Tensor]:
        """Transcribe a batch: :meth:`encode`, then :meth:`search`.

        Args:
            waveforms (torch.Tensor): `(B, N)`.
            lengths (torch.Tensor): `(B,)`.
            decoding, beam_size, ctc_posteriors, lm: as :meth:`search` takes them.
            cached (tuple or None, optional): cached encoder states, as :meth:`encode` takes them.

        Returns:
            (list[Hypothesis], torch.Tensor): the best hypothesis per utterance and the listener lengths `(B,)`.
        """
        states, encoder_lengths = self.encode(waveforms, lengths, cached=cached)
        return self.search(states, encoder_lengths, decoding, beam_size, ctc_posteriors, lm), encoder_lengths

    @torch.no_grad()
    def search(
        self,
        states: torch.Tensor,
        encoder_lengths: torch.Tensor,
        decoding: DecodeConfig | None = None,
        beam_size: int | None = None,
        ctc_posteriors: list | None = None,
        lm: CharLM | None = None,
    ) -> list[Hypothesis]:
        """The best transcript of each utterance by the shared batched beam search, then CTC rescoring.

        The beam's score sums named, weighted scorers (:class:`speech_attend.model.lm.WeightedScorers`):
        ``log p_att + lm_weight * log p_lm + length_bonus * |y|``; the CTC rescoring mixes its
        score with the attention's part only (each hypothesis' ``part_scores``). Scorers of weight 0 are left out.

        Args:
            states (torch.Tensor): listener states `(B, L, D)` (from :meth:`encode`).
            encoder_lengths (torch.Tensor): `(B,)`.
            decoding (DecodeConfig or None, optional): search settings; ``None``: the model's own (``decoding``).
            beam_size (int or None, optional): overrides ``decoding.beam_size``.
            ctc_posteriors (list or None, optional): with a CTC head, each utterance's CTC
                log-probabilities `(L_b * u, V)` are appended to it (for word times and
                confidence, :mod:`speech_attend.infer.timing`). (Default: ``None``)
            lm (CharLM or None, optional): a language model over this model's vocabulary, fused
                with ``decoding.lm_weight``; without one, ``lm_weight`` is not used. (Default: ``None``)

        Returns:
            list[Hypothesis]: the best hypothesis per utterance (``attention`` `(len, L)`, ``token_scores``).
        """
        decoding = self.decoding if decoding is None else decoding
        sos, eos = self.vocabulary.sos_id, self.vocabulary.eos_id
        beam = decoding.beam_size if beam_size is None else beam_size
        memory, state = self.speller.start(states, encoder_lengths)  # one memory row serves the K beams
        max_len = (encoder_lengths.float() * decoding.max_len_ratio).ceil().long() + 1  # +1 for <eos>
        rescore = self.ctc_head is not None and decoding.ctc_weight > 0
        batch, device = states.size(0), states.device
        scorers = WeightedScorers(
            {  # name -> weight, step function, initial state: one entry per scorer
                "attention": Scorer(1.0, self.speller.step, state),
                "lm": lm_scorer(
                    lm, decoding.lm_weight, batch, device, decoding.lm_bfloat16
                ),  # without a language model: weight 0, left out
                "length": length_bonus_scorer(decoding.length_bonus, self.vocab_size, eos, batch, device),
            }
        )
        with native_cpu_kernels():
            results = beam_search(
                scorers.step,
                scorers.initial_state(),
                batch,
                beam,
                sos,
                eos,
                max_len,
                length_penalty=decoding.length_penalty,
                nbest=beam if rescore else 1,
                memory=memory,
                max_repeats=decoding.max_repeats,
                never=self.vocabulary.never_written,
            )
        if self.ctc_head is not None and (rescore or ctc_posteriors is not None):
            log_probs, ctc_lengths = self.ctc_log_probs(states, encoder_lengths)
            if ctc_posteriors is not None:
                ctc_posteriors.extend(log_probs[b, : ctc_lengths[b]] for b in range(batch))
        if rescore:
            results = [self._rescore(hyps, log_probs[b, : ctc_lengths[b]], decoding, scorers) for b, hyps in enumerate(results)]
        best = [hyps[0] for hyps in results]
        for hyp in best:  # confidences read the speller alone, not the language model or the length bonus
            hyp.token_scores = hyp.part_scores[scorers.decoder][: len(hyp.tokens)]
        return best

    def _rescore(
        self, hyps: list[Hypothesis], log_probs: torch.Tensor, decoding: DecodeConfig, scorers: WeightedScorers
    ) -> list[Hypothesis]:
        """Re-rank one utterance's n-best by ``(1 - w) log p_att + w log p_ctc`` plus the other
        scorers' weighted scores (language model, length bonus), length-normalised.

        ``log p_att`` and the other scorers' scores are those the search summed, kept per token in
        each hypothesis' ``part_scores`` (:class:`speech_attend.model.lm.WeightedScorers`): no
        scorer runs again.

        Args:
            hyps (list[Hypothesis]): the n-best of one utterance, from a search with ``scorers``.
            log_probs (torch.Tensor): its CTC log-probabilities `(T, V)`.
            decoding (DecodeConfig): ``ctc_weight`` and ``length_penalty``.
            scorers (WeightedScorers): the search's scorers.
        """
        others = scorers.others(hyps)  # the language model and length bonus, weighted
        targets = [torch.tensor(h.tokens, dtype=torch.long) for h in hyps]
        target_lengths = torch.tensor([len(t) for t in targets])
        steps = log_probs.size(0)
        ctc_nll = F.ctc_loss(
            log_probs[:, None].expand(steps, len(hyps), -1),  # (T, N, V): the same frames for each hypothesis
            torch.cat(targets).to(log_probs.device) if target_lengths.sum() else torch.zeros(0, dtype=torch.long),
            torch.full((len(hyps),), steps, dtype=torch.long),
            target_lengths,
            blank=self.blank_id,
            reduction="none",
            zero_infinity=False,
        )  # (N,); inf where the frames cannot hold the hypothesis
        rescored = []
        for hyp, nll, other in zip(hyps, ctc_nll.tolist(), others):
            attention = sum(hyp.part_scores[scorers.decoder])  # log p_att(y | x), its <eos> included where finished
            score = (1 - decoding.ctc_weight) * attention - decoding.ctc_weight * (nll if math.isfinite(nll) else 1e4) + other
            normalized = length_normalized(score, len(hyp.tokens) + int(hyp.finished), decoding.length_penalty)
            rescored.append(replace(hyp, score=score, normalized_score=normalized))
        return sorted(rescored, key=lambda h: h.normalized_score, reverse=True)


def build_recognizer(hparams: dict) -> LAS:
    """The model (untrained) that saved hyper-parameters describe, with its vocabulary and decoding settings.

    Args:
        hparams (dict): a checkpoint's ``hyper_parameters`` or an exported ``config.json``'s, of
            any layout this code saved (:mod:`speech_attend.model.migrations`).

    Raises:
        ValueError: no vocabulary, or settings these classes do not know.
    """
    if not hparams.get("vocabulary"):
        raise ValueError("the model config has no vocabulary; was it saved by speech-attend?")
    hparams = migrate_hyper_parameters(hparams)  # an older layout read as today's
    configs = [as_dataclass(cls, hparams.get(key)) for cls, key in ((LASConfig, "las"), (FeatureConfig, "features"))]
    return LAS(*configs, Vocabulary(hparams["vocabulary"]), as_dataclass(DecodeConfig, hparams.get("decoding")))
