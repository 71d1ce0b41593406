"""A character language model for the speller, fused into the beam search (shallow fusion).

Listen, Attend and Spell learns its spelling from the transcripts it hears; a language model
learns it from text alone, which is cheap and plentiful (Chan et al. 2016 rescored with one;
Gulcehre et al. 2015 named the fusion). The beam ranks each hypothesis ``y`` by a weighted sum
of named scorers (ESPnet's ``BeamSearch``, SpeechBrain's ``ScorerBuilder``)::

    score(y) = log p_att(y | x)  +  lm_weight * log p_lm(y)  +  length_bonus * |y|

where the length bonus offsets the language model's preference for short outputs; the CTC head
then rescores the n-best list as before (:meth:`speech_attend.model.las.LAS.decode`). Weights of 0
leave a scorer out, so a model without a language model decodes exactly as it always did.

The model is a plain LSTM over the recognizer's own vocabulary (specials included) and exposes
the speller's protocol: :meth:`CharLM.initial_state`, :meth:`CharLM.step` (one character for a
batch of hypotheses -> log-probabilities over the vocabulary) and :meth:`CharLM.score` (whole
sequences). :func:`speech_attend.train.lm.fit_lm` trains it (``speech-attend fit-lm``);
:func:`save_lm` / :func:`load_lm` write and read ``lm.safetensors`` + ``lm.json`` with the safe
model-file helpers, and a language model over other characters than the recognizer's is refused.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from shared import Hypothesis, Vocabulary
from shared.io.config import as_dataclass
from shared.io.model_files import CheckpointError, export_folder, load_model_files

__all__ = [
    "LMConfig",
    "CharLM",
    "Scorer",
    "WeightedScorers",
    "length_bonus_scorer",
    "lm_scorer",
    "bfloat16_is_fast",
    "save_lm",
    "load_lm",
    "has_lm",
    "LM_FILES",
    "MAX_LM_WEIGHT",
    "DEFAULT_LM_WEIGHT",
]


APP = "speech-attend"
LM_FILES = ("lm.safetensors", "lm.json")  # beside model.safetensors / config.json in an exported folder
MAX_LM_WEIGHT = 2.0  # --lm-weight is in [0, MAX_LM_WEIGHT]: beyond it the language model drowns the audio
DEFAULT_LM_WEIGHT = (
    0.3  # what export --lm saves unless told (ESPnet's LibriSpeech setting); choose it on dev (speech-attend tune)
)


@dataclass(frozen=True)
class LMConfig:
    """Architecture of the character language model."""

    embedding_dim: int = 64  # character embedding
    hidden: int = 512  # LSTM units per layer
    layers: int = 2  # stacked LSTM layers
    dropout: float = 0.1  # on the embeddings, between layers and before the output layer


# (hidden (N, layers, H), cell (N, layers, H)): batch first, as shared.beam_search reorders state along dim 0.
LMState = tuple[torch.Tensor, torch.Tensor]


class CharLM(nn.Module):
    """An LSTM language model over characters: ``P(y_i | y_<i)``.

    Args:
        config (LMConfig): architecture.
        vocab_size (int): characters including the specials ``V`` (the recognizer's vocabulary).
    """

    def __init__(self, config: LMConfig, vocab_size: int):
        super().__init__()
        self.config, self.vocab_size = config, vocab_size
        self.embedding = nn.Embedding(vocab_size, config.embedding_dim)
        self.lstm = nn.LSTM(
            config.embedding_dim,
            config.hidden,
            config.layers,
            batch_first=True,
            dropout=config.dropout if config.layers > 1 else 0.0,
        )
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(config.hidden, vocab_size)

    def forward(self, inputs: torch.Tensor, state: LMState | None = None) -> tuple[torch.Tensor, LMState]:
        """Logits for the next character after every position.

        Args:
            inputs (torch.Tensor): ``<sos> y_1 .. y_{U-1}`` with shape `(B, U)`.
            state (LMState or None, optional): from :meth:`initial_state` or an earlier call;
                ``None`` starts from zeros.

        Returns:
            (torch.Tensor, LMState): logits `(B, U, V)` and the state after the last position.
        """
        hidden = None if state is None else tuple(s.transpose(0, 1).contiguous() for s in state)  # (layers, B, H)
        outputs, (h, c) = self.lstm(self.dropout(self.embedding(inputs)), hidden)  # (B, U, H)
        return self.output(self.dropout(outputs)), (h.transpose(0, 1), c.transpose(0, 1))  # (B, U, V), (B, layers, H)

    def initial_state(self, batch_size: int, device: torch.device | str = "cpu") -> LMState:
        """Zero hidden and cell states, `(B, layers, H)` each."""
        zeros = torch.zeros(batch_size, self.config.layers, self.config.hidden, device=device)
        return zeros, zeros.clone()

    def step(self, tokens: torch.Tensor, state: LMState, memory: Any = None) -> tuple[torch.Tensor, LMState, None]:
        """Advance by one character: the step function for :func:`shared.beam_search`.

        Args:
            tokens (torch.Tensor): previous characters `(N,)`.
            state (LMState): from :meth:`initial_state` or the previous step.
            memory: ignored (the speller's attention memory; a language model does not listen).

        Returns:
            (torch.Tensor, LMState, None): log-probabilities `(N, V)`, the new state, no attention.
        """
        logits, state = self(tokens[:, None], state)  # (N, 1, V)
        return logits[:, 0].float().log_softmax(-1), state, None

    def score(
        self, sequences: Sequence[Sequence[int]], sos: int, eos: int, finished: Sequence[bool] | None = None
    ) -> torch.Tensor:
        """``log p_lm(y)`` of whole sequences, ``<eos>`` included where a sequence is finished.

        Args:
            sequences (list of list of int): tokens without ``<sos>``/``<eos>``, ``H`` of them.
            sos (int): start id. eos (int): end id.
            finished (list of bool or None, optional): which sequences end with ``<eos>``;
                ``None``: all of them.

        Returns:
            torch.Tensor: `(H,)` summed log-probabilities.
        """
        finished = [True] * len(sequences) if finished is None else list(finished)
        device = self.output.weight.device
        longest = max(len(s) for s in sequences) + 1
        inputs = torch.full((len(sequences), longest), sos, dtype=torch.long, device=device)  # (H, U+1)
        targets = torch.full_like(inputs, -1)  # -1: not scored
        for row, (tokens, done) in enumerate(zip(sequences, finished)):
            inputs[row, 1 : len(tokens) + 1] = torch.tensor(tokens, dtype=torch.long)
            targets[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            if done:
                targets[row, len(tokens)] = eos
        log_probs = self(inputs)[0].float().log_softmax(-1)  # (H, U+1, V)
        picked = log_probs.gather(-1, targets.clamp_min(0)[..., None])[..., 0]  # (H, U+1)
        return picked.masked_fill(targets < 0, 0.0).sum(1)


# --- Shallow fusion: the beam's score as a sum of named, weighted scorers -------------------------


class Scorer(NamedTuple):
    """One term of the beam's score, ``weight * log p(y_i | y_<i)``.

    Attributes:
        weight (float): its weight in the sum.
        step (callable): ``(tokens (N,), state, memory) -> (log_probs (N, V), state, attention or None)``.
        state: its initial state, a nest of tensors with first dimension ``B``.
    """

    weight: float
    step: Callable
    state: Any


class WeightedScorers:
    """The step function of a beam search that sums named, weighted scorers.

    The first scorer is the decoder (weight 1; its attention weights are the search's); every
    other one adds ``weight * log p`` to each step's log-probabilities. Its state is a dict, one entry per
    scorer, which :func:`shared.beam_search` reorders like any nest. Each step also returns every
    scorer's own log-probabilities as the search's ``parts``, so each hypothesis carries each
    scorer's score of each token (``Hypothesis.part_scores``) and rescoring the n-best runs no
    scorer again.

    Args:
        scorers (dict of str to Scorer): the terms, the decoder first; zero weights are left out.
    """

    def __init__(self, scorers: dict[str, Scorer]):
        self.scorers = {name: s for i, (name, s) in enumerate(scorers.items()) if i == 0 or s.weight != 0}
        self.decoder = next(iter(self.scorers))

    def initial_state(self) -> dict[str, Any]:
        return {name: scorer.state for name, scorer in self.scorers.items()}

    def step(self, tokens: torch.Tensor, state: dict[str, Any], memory: Any = None):
        """``sum_s w_s log p_s(. | y_<i)`` `(N, V)`, the new states, the decoder's attention, and
        each scorer's ``log p_s`` `(N, V)` by name (the search's ``parts``)."""
        total, new_state, attention, parts = 0.0, {}, None, {}
        for name, scorer in self.scorers.items():
            parts[name], new_state[name], weights = scorer.step(tokens, state[name], memory)
            total = total + scorer.weight * parts[name]  # the decoder's 1.0 * x is x, bit for bit
            if name == self.decoder:
                attention = weights
        return total, new_state, attention, parts

    def others(self, hyps: list[Hypothesis]) -> list[float]:
        """Each hypothesis' score from the scorers other than the decoder, weighted and summed."""
        return [
            sum(scorer.weight * sum(hyp.part_scores[name]) for name, scorer in self.scorers.items() if name != self.decoder)
            for hyp in hyps
        ]


def length_bonus_scorer(weight: float, vocab_size: int, eos: int, batch_size: int, device: torch.device | str = "cpu") -> Scorer:
    """``weight`` for every character but ``<eos>``: ``weight * |y|`` over a hypothesis."""
    bonus = torch.ones(vocab_size, device=device)
    bonus[eos] = 0.0

    def step(tokens: torch.Tensor, state: torch.Tensor, memory: Any = None):
        return bonus.expand(tokens.size(0), -1), state, None

    return Scorer(weight, step, torch.zeros(batch_size, device=device))


def bfloat16_is_fast(device: torch.device | str = "cpu") -> bool:
    """Whether bfloat16 products run natively on ``device``: a CPU with AVX512-BF16 or AMX, through
    oneDNN (without them, or without oneDNN, bfloat16 is several times slower than float32)."""
    return (
        torch.device(device).type == "cpu"
        and torch.backends.mkldnn.is_available()
        and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def lm_scorer(
    lm: CharLM | None, weight: float, batch_size: int, device: torch.device | str = "cpu", bfloat16: bool = False
) -> Scorer:
    """The language model as a scorer of the beam search (``lm`` ``None``: a scorer of weight 0).

    With ``bfloat16``, where :func:`bfloat16_is_fast`, a bfloat16 copy of the model steps through
    oneDNN (the decoder's own steps keep float32 and their native kernels); its log-probabilities
    come back as float32. Elsewhere ``bfloat16`` changes nothing.
    """
    if lm is None:
        return Scorer(0.0, None, None)
    if not (bfloat16 and bfloat16_is_fast(device)):
        return Scorer(weight, lm.step, lm.initial_state(batch_size, device))
    fast = copy.deepcopy(lm).to(torch.bfloat16)

    def step(tokens: torch.Tensor, state: LMState, memory: Any = None):
        # The search turns oneDNN off for the speller; set the flag alone (mkldnn.flags() also sets
        # TF32, which warns on every call).
        enabled, torch.backends.mkldnn.enabled = torch.backends.mkldnn.enabled, True
        try:
            return fast.step(tokens, state, memory)
        finally:
            torch.backends.mkldnn.enabled = enabled

    return Scorer(weight, step, tuple(s.to(torch.bfloat16) for s in lm.initial_state(batch_size, device)))


# --- Files ---------------------------------------------------------------------------------------


def save_lm(out_dir: str | os.PathLike, lm: CharLM, vocabulary: Vocabulary, record: dict | None = None) -> Path:
    """Write ``lm.safetensors`` + ``lm.json`` (config, vocabulary, and ``record``: how it was trained)."""
    hyper_parameters = {"lm": asdict(lm.config), "vocabulary": vocabulary.to_dict()["tokens"], **(record or {})}
    return export_folder(out_dir, APP, lm.state_dict(), hyper_parameters, files=LM_FILES)


def has_lm(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a language model (``lm.safetensors`` or ``lm.json``)."""
    return Path(folder).is_dir() and any((Path(folder) / name).exists() for name in LM_FILES)


def load_lm(folder: str | os.PathLike, vocabulary: Vocabulary | None = None) -> tuple[CharLM, dict]:
    """The language model in ``folder`` (eval mode) and its ``lm.json`` hyper-parameters.

    Args:
        folder (str or PathLike): written by :func:`save_lm` (``fit-lm --out``, or ``export --lm``).
        vocabulary (Vocabulary or None, optional): the recognizer's. The same characters in
            another order are mapped onto its ids (the weights' rows reordered, exactly);
            other characters are refused.

    Raises:
        CheckpointError: missing, corrupt or truncated files, weights that do not fit the
            config, or a language model over other characters than ``vocabulary``'s.
    """
    config_file = Path(folder) / LM_FILES[1]
    if not Path(folder).is_dir():
        raise CheckpointError(
            f"{folder}: not a language model folder; expected a folder with {' and '.join(LM_FILES)} (from speech-attend fit-lm)"
        )
    files = load_model_files(folder, APP, files=LM_FILES)
    hp = files.hyper_parameters
    try:
        config, saved = as_dataclass(LMConfig, hp.get("lm")), Vocabulary(hp["vocabulary"])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{config_file}: not a speech-attend language model config ({str(err).splitlines()[0]})") from None
    lm = CharLM(config, len(saved))
    try:
        lm.load_state_dict(files.state_dict)
    except RuntimeError as err:
        raise CheckpointError(
            f"{Path(folder) / LM_FILES[0]}: weights do not fit {config_file} ({str(err).splitlines()[0]})"
        ) from None
    if vocabulary is not None and saved != vocabulary:
        missing, extra = set(vocabulary.itos) - set(saved.itos), set(saved.itos) - set(vocabulary.itos)
        if missing or extra:
            raise CheckpointError(
                f"{config_file}: a language model over other characters than the recognizer's "
                f"(it lacks {sorted(missing)}, and has {sorted(extra)} the recognizer does not); "
                "train one with speech-attend fit-lm --vocabulary-from the recognizer"
            )
        _reorder(lm, [saved.stoi[token] for token in vocabulary.itos])
        hp = {**hp, "vocabulary": vocabulary.to_dict()["tokens"]}
    return lm.eval(), hp


@torch.no_grad()
def _reorder(lm: CharLM, order: list[int]) -> None:
    """Give character ``order[i]`` of the language model id ``i``: its embedding and output rows move."""
    index = torch.tensor(order)
    lm.embedding.weight.copy_(lm.embedding.weight[index])
    lm.output.weight.copy_(lm.output.weight[index])
    lm.output.bias.copy_(lm.output.bias[index])
