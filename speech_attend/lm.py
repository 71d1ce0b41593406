"""A character language model for the speller, fused into the beam search (shallow fusion).

Listen, Attend and Spell learns its spelling from the transcripts it hears; a language model
learns it from text alone, which is cheap and plentiful (Chan et al. 2016 rescored with one;
Gulcehre et al. 2015 named the fusion). The beam ranks each hypothesis ``y`` by a weighted sum
of named scorers (ESPnet's ``BeamSearch``, SpeechBrain's ``ScorerBuilder``)::

    score(y) = log p_att(y | x)  +  lm_weight * log p_lm(y)  +  length_bonus * |y|

where the length bonus offsets the language model's preference for short outputs; the CTC head
then rescores the n-best list as before (:meth:`speech_attend.model.LAS.decode`). Weights of 0
leave a scorer out, so a model without a language model decodes exactly as it always did.

The model is a plain LSTM over the recognizer's own vocabulary (specials included) and exposes
the speller's protocol: :meth:`CharLM.initial_state`, :meth:`CharLM.step` (one character for a
batch of hypotheses -> log-probabilities over the vocabulary) and :meth:`CharLM.score` (whole
sequences). :func:`fit_lm` trains it in a plain loop (``speech-attend fit-lm``);
:func:`save_lm` / :func:`load_lm` write and read ``lm.safetensors`` + ``lm.json`` with the safe
model-file helpers, and a language model over other characters than the recognizer's is refused.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from shared import Hypothesis, Vocabulary
from shared.vocabulary import SPECIALS
from shared.training.config import as_dataclass
from shared.training.model_files import CONFIG_FILE, WEIGHTS_FILE, CheckpointError, export_folder, load_model_files

from .text import map_out_of_vocabulary, normalize_text

__all__ = [
    "LMConfig", "CharLM", "Scorer", "WeightedScorers", "length_bonus_scorer", "lm_scorer", "fit_lm", "train_lm", "perplexity",
    "save_lm", "load_lm", "has_lm", "lm_sentences", "lm_sentences_of", "wordnet_lm_splits", "vocabulary_from", "LM_FILES", "MAX_LM_WEIGHT", "DEFAULT_LM_WEIGHT",
]

APP = "speech-attend"
LM_FILES = ("lm.safetensors", "lm.json")  # beside model.safetensors / config.json in an exported folder
MAX_LM_WEIGHT = 2.0  # --lm-weight is in [0, MAX_LM_WEIGHT]: beyond it the language model drowns the audio
DEFAULT_LM_WEIGHT = 0.3  # what export --lm saves unless told (ESPnet's LibriSpeech setting); choose it on dev (scripts/tune_lm.py)


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
        self.lstm = nn.LSTM(config.embedding_dim, config.hidden, config.layers, batch_first=True,
                            dropout=config.dropout if config.layers > 1 else 0.0)
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

    def score(self, sequences: Sequence[Sequence[int]], sos: int, eos: int, finished: Sequence[bool] | None = None) -> torch.Tensor:
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
        score (callable or None): ``(hypotheses) -> (H,)`` its log-probability of whole
            hypotheses (for rescoring the n-best); ``None`` for the attention decoder, whose
            part is what remains of the beam's score.
    """

    weight: float
    step: Callable
    state: Any
    score: Callable[[list[Hypothesis]], torch.Tensor] | None = None


class WeightedScorers:
    """The step function of a beam search that sums named, weighted scorers.

    The first scorer is the decoder (weight 1; its attention weights are the search's); every
    other one adds ``weight * log p`` to each step's log-probabilities. Its state is a dict, one entry per
    scorer, which :func:`shared.beam_search` reorders like any nest.

    Args:
        scorers (dict of str to Scorer): the terms, the decoder first; zero weights are left out.
    """

    def __init__(self, scorers: dict[str, Scorer]):
        self.scorers = {name: s for i, (name, s) in enumerate(scorers.items()) if i == 0 or s.weight != 0}
        self.decoder = next(iter(self.scorers))

    def initial_state(self) -> dict[str, Any]:
        return {name: scorer.state for name, scorer in self.scorers.items()}

    def step(self, tokens: torch.Tensor, state: dict[str, Any], memory: Any = None):
        """``sum_s w_s log p_s(. | y_<i)`` `(N, V)`, the new states, and the decoder's attention."""
        total, new_state, attention = 0.0, {}, None
        for name, scorer in self.scorers.items():
            log_probs, new_state[name], weights = scorer.step(tokens, state[name], memory)
            total = total + scorer.weight * log_probs  # the decoder's 1.0 * x is x, bit for bit
            if name == self.decoder:
                attention = weights
        return total, new_state, attention

    def others(self, hyps: list[Hypothesis]) -> list[float]:
        """Each hypothesis' score from the scorers other than the decoder, weighted and summed."""
        total = torch.zeros(len(hyps), dtype=torch.float64)
        for name, scorer in self.scorers.items():
            if name != self.decoder:
                total += scorer.weight * scorer.score(hyps).double().cpu()
        return total.tolist()


def length_bonus_scorer(weight: float, vocab_size: int, eos: int, batch_size: int, device: torch.device | str = "cpu") -> Scorer:
    """``weight`` for every character but ``<eos>``: ``weight * |y|`` over a hypothesis."""
    bonus = torch.ones(vocab_size, device=device)
    bonus[eos] = 0.0

    def step(tokens: torch.Tensor, state: torch.Tensor, memory: Any = None):
        return bonus.expand(tokens.size(0), -1), state, None

    def score(hyps: list[Hypothesis]) -> torch.Tensor:
        return torch.tensor([float(len(h.tokens)) for h in hyps])

    return Scorer(weight, step, torch.zeros(batch_size, device=device), score)


def lm_scorer(lm: CharLM | None, weight: float, batch_size: int, sos: int, eos: int, device: torch.device | str = "cpu") -> Scorer:
    """The language model as a scorer of the beam search (``lm`` ``None``: a scorer of weight 0)."""
    if lm is None:
        return Scorer(0.0, None, None)
    return Scorer(weight, lm.step, lm.initial_state(batch_size, device),
                  lambda hyps: lm.score([h.tokens for h in hyps], sos, eos, [h.finished for h in hyps]))


# --- Text ----------------------------------------------------------------------------------------


def wordnet_lm_splits() -> dict[str, list[str]]:
    """The WordNet sentences split as the spoken corpus splits them (train / dev / test)."""
    from .wordnet_sentences import load_sentences, split_sentences

    return split_sentences(load_sentences())


def lm_sentences(source: str, vocabulary: Vocabulary) -> list[str]:
    """Training sentences for the language model.

    Args:
        source (str): ``wordnet`` (the WordNet *training* sentences; never dev or test) or a
            UTF-8 text file, one sentence per line, normalised like the transcripts
            (:func:`speech_attend.text.normalize_text`).
        vocabulary (Vocabulary): characters outside it are dropped.

    Raises:
        ValueError: the file is missing, unreadable, or holds no sentence.
    """
    if source == "wordnet":
        texts = wordnet_lm_splits()["train"]
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: text file not found (--text-from expects wordnet or a .txt file, one sentence a line)")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
        texts = [normalize_text(line) for line in lines]
    sentences = lm_sentences_of(texts, vocabulary)
    if not sentences:
        raise ValueError(f"{source}: no sentence with characters of the vocabulary")
    return sentences


def lm_sentences_of(texts: Sequence[str], vocabulary: Vocabulary) -> list[str]:
    """Normalised ``texts`` without the characters outside ``vocabulary``; empty ones left out."""
    charset = set(vocabulary.itos[len(SPECIALS):])
    sentences = [map_out_of_vocabulary(t, charset) for t in texts]
    return [s for s in sentences if s]


def vocabulary_from(path: str | os.PathLike) -> Vocabulary:
    """The recognizer's vocabulary: from a ``.ckpt``, an exported folder, or a corpus folder
    (the characters of its ``train`` split, as :class:`~speech_attend.datamodule.SpeechDataModule`
    builds them with its default text settings)."""
    path = Path(path)
    if path.is_dir() and not (path / WEIGHTS_FILE).is_file() and not (path / CONFIG_FILE).is_file():
        from .corpora import read_corpus
        from .data import build_vocabulary

        return build_vocabulary([normalize_text(u.text) for u in read_corpus(path, "train")])
    tokens = load_model_files(path, APP).hyper_parameters.get("vocabulary")
    if not tokens:
        raise CheckpointError(f"{path}: no vocabulary in the model config; was it saved by speech-attend?")
    return Vocabulary(tokens)


# --- Training ------------------------------------------------------------------------------------


def _batches(ids: list[list[int]], batch_size: int, rng: random.Random) -> list[list[list[int]]]:
    """Shuffled batches of sentences of similar length (sorted within pools of 50 batches)."""
    order = list(range(len(ids)))
    rng.shuffle(order)
    pool = batch_size * 50
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: len(ids[i]))
        batches += [[ids[i] for i in chunk[b : b + batch_size]] for b in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def _tensors(batch: list[list[int]], vocabulary: Vocabulary) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``<sos> y`` and targets ``y <eos>``, `(B, U+1)` each, padded with ``<pad>``."""
    longest = max(len(s) for s in batch) + 1
    inputs = torch.full((len(batch), longest), vocabulary.pad_id, dtype=torch.long)
    targets = torch.full_like(inputs, vocabulary.pad_id)
    for row, ids in enumerate(batch):
        inputs[row, : len(ids) + 1] = torch.tensor([vocabulary.sos_id, *ids])
        targets[row, : len(ids) + 1] = torch.tensor([*ids, vocabulary.eos_id])
    return inputs, targets


@torch.no_grad()
def perplexity(lm: CharLM, sentences: Sequence[str], vocabulary: Vocabulary, batch_size: int = 128) -> float:
    """Per-character perplexity, ``<eos>`` counted as a character: ``exp(mean NLL)``."""
    was_training = lm.training
    lm.eval()
    ids = [vocabulary.encode(s) for s in sentences]
    total, count = 0.0, 0
    for start in range(0, len(ids), batch_size):
        inputs, targets = _tensors(ids[start : start + batch_size], vocabulary)
        logits = lm(inputs)[0]  # (B, U+1, V)
        total += F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=vocabulary.pad_id, reduction="sum").item()
        count += int((targets != vocabulary.pad_id).sum())
    lm.train(was_training)
    return math.exp(total / max(count, 1))


def fit_lm(
    sentences: Sequence[str],
    vocabulary: Vocabulary,
    config: LMConfig = LMConfig(),
    seconds: float = 600.0,
    max_steps: int | None = None,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[CharLM, dict]:
    """Train a :class:`CharLM` on text for a wall-clock budget (or a number of steps).

    Adam with a short warm-up and a learning rate that falls linearly to a tenth over the
    budget (in time, or in steps when ``max_steps`` comes first), gradients clipped at 1.
    Ctrl-C or SIGTERM (a session's end) stops it after the current update, and the model
    trained so far is returned (``stopped`` in the record).

    Args:
        sentences (list of str): normalised training sentences.
        vocabulary (Vocabulary): the recognizer's.
        config (LMConfig, optional): architecture.
        seconds (float, optional): wall-clock budget. (Default: ``600``)
        max_steps (int or None, optional): stop after this many updates. (Default: ``None``)
        batch_size (int, optional): sentences per update. (Default: ``64``)
        lr (float, optional): peak learning rate. (Default: ``3e-3``)
        seed (int, optional): initialisation and batch order. (Default: ``0``)
        progress (bool, optional): show a tqdm bar. (Default: ``True``)
        device (str or torch.device, optional): where it trains. (Default: ``"cpu"``)

    Returns:
        (CharLM, dict): the model (eval mode, on the CPU) and its training record: ``steps``,
        ``epochs``, ``seconds``, ``losses`` (the mean training loss of every 20 updates), ``stopped``.
    """
    from tqdm import tqdm

    torch.manual_seed(seed)
    rng = random.Random(seed)
    lm = CharLM(config, len(vocabulary)).to(device).train()
    optimizer = torch.optim.Adam(lm.parameters(), lr=lr)
    ids = [vocabulary.encode(s) for s in sentences]
    warmup = 100
    start, step, epoch, losses, window = time.perf_counter(), 0, 0, [], []
    bar = tqdm(total=max_steps if max_steps else round(seconds), unit="step" if max_steps else "s", desc="fit-lm", disable=not progress)
    done = False
    with _StopRequest() as stop:
        while not done:
            epoch += 1
            for batch in _batches(ids, batch_size, rng):
                elapsed = time.perf_counter() - start
                spent = step / max_steps if max_steps else 0.0
                spent = max(spent, elapsed / seconds)
                if spent >= 1.0 or stop.requested:
                    done = True
                    break
                for group in optimizer.param_groups:
                    group["lr"] = lr * min(1.0, (step + 1) / warmup) * (1.0 - 0.9 * spent)
                inputs, targets = (t.to(device) for t in _tensors(batch, vocabulary))
                logits = lm(inputs)[0]  # (B, U+1, V)
                loss = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=vocabulary.pad_id)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
                optimizer.step()
                step += 1
                window.append(loss.item())
                if len(window) == 20:
                    losses.append(sum(window) / len(window))
                    window = []
                    bar.set_postfix(epoch=epoch, loss=f"{losses[-1]:.3f}")
                bar.update(1 if max_steps else round(time.perf_counter() - start) - bar.n)
    if window:
        losses.append(sum(window) / len(window))
    bar.close()
    record = {"steps": step, "epochs": epoch, "seconds": round(time.perf_counter() - start, 1), "losses": losses, "stopped": stop.requested}
    return lm.cpu().eval(), record


class _StopRequest:
    """While inside, SIGINT and SIGTERM set ``requested`` instead of ending the process (main thread only)."""

    def __enter__(self) -> "_StopRequest":
        import signal
        import threading

        self.requested, self._previous = False, {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._request)
        return self

    def _request(self, signum, frame) -> None:
        self.requested = True

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def train_lm(
    out_dir: str | os.PathLike, text_from: str, vocabulary_source: str | os.PathLike, config: LMConfig = LMConfig(),
    seconds: float = 600.0, max_steps: int | None = None, batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
    dev_from: str = "wordnet", progress: bool = True, device: str = "cpu",
) -> dict:
    """``speech-attend fit-lm``: train on ``text_from`` over the vocabulary of ``vocabulary_source``,
    measure the perplexity on ``dev_from``, and write ``out_dir/lm.safetensors`` + ``lm.json``.

    Args:
        out_dir (str or PathLike): output folder (created; files there are replaced).
        text_from (str): ``wordnet`` (its training sentences) or a text file (:func:`lm_sentences`).
        vocabulary_source (str or PathLike): a ``.ckpt``, an exported folder or a corpus folder (:func:`vocabulary_from`).
        config (LMConfig, optional): architecture.
        seconds, max_steps, batch_size, lr, seed, progress, device: see :func:`fit_lm`.
        dev_from (str, optional): ``wordnet`` (its dev sentences), a text file, or ``none``. (Default: ``wordnet``)

    Returns:
        dict: the record saved in ``lm.json`` (text source, sentences, characters, steps,
        seconds, final training loss, dev perplexity, and ``dev_test_overlap``: training
        sentences that are WordNet dev or test sentences, which should be 0).
    """
    for name, value, low in (("hidden", config.hidden, 1), ("layers", config.layers, 1), ("embedding", config.embedding_dim, 1),
                             ("batch-size", batch_size, 1)):
        if value < low:
            raise ValueError(f"--{name} must be at least {low}, got {value}")
    if not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"--dropout must be in [0, 1), got {config.dropout:g}")
    if not seconds > 0 or (max_steps is not None and max_steps < 1):
        raise ValueError(f"--minutes must be positive and --max-steps at least 1, got {seconds / 60:g} and {max_steps}")
    vocabulary = vocabulary_from(vocabulary_source)
    sentences = lm_sentences(text_from, vocabulary)
    record: dict[str, Any] = {"text_source": text_from if text_from == "wordnet" else str(Path(text_from).resolve()),
                              "sentences": len(sentences), "characters": sum(len(s) + 1 for s in sentences)}
    dev: list[str] = []
    if dev_from == "wordnet":
        splits = wordnet_lm_splits()
        held_out = set(splits["dev"]) | set(splits["test"])
        record["dev_test_overlap"] = sum(s in held_out for s in sentences)
        dev = lm_sentences_of(splits["dev"], vocabulary)
    elif dev_from != "none":
        dev = lm_sentences(dev_from, vocabulary)
    lm, fit = fit_lm(sentences, vocabulary, config, seconds, max_steps, batch_size, lr, seed, progress, device)
    record.update(steps=fit["steps"], epochs=fit["epochs"], seconds=fit["seconds"], stopped_early=fit["stopped"], device=str(device),
                  batch_size=batch_size, lr=lr, seed=seed,
                  train_loss=round(fit["losses"][-1], 4) if fit["losses"] else None, dev_source=dev_from,
                  dev_sentences=len(dev), dev_perplexity=None)
    save_lm(out_dir, lm, vocabulary, record)  # saved before the dev pass too: a stop during it keeps the model
    if dev:
        record["dev_perplexity"] = round(perplexity(lm, dev, vocabulary), 4)
        save_lm(out_dir, lm, vocabulary, record)
    return record


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
        raise CheckpointError(f"{folder}: not a language model folder; expected a folder with {' and '.join(LM_FILES)} (from speech-attend fit-lm)")
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
        raise CheckpointError(f"{Path(folder) / LM_FILES[0]}: weights do not fit {config_file} ({str(err).splitlines()[0]})") from None
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
