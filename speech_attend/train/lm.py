"""Training the speller's character language model (``speech-attend fit-lm``) on text alone.

The model itself, its scorers in the beam search and its files are :mod:`speech_attend.model.lm`.
:func:`lm_sentences` gathers the text (the built-in corpus's WordNet *training* sentences, or a
text file; never dev or test sentences), :func:`fit_lm` trains it in a plain loop with a time
budget, and :func:`perplexity` scores it on held-out sentences.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from shared import Vocabulary
from shared.io.model_files import CONFIG_FILE, WEIGHTS_FILE, CheckpointError, load_model_files
from shared.vocabulary import SPECIALS
from speech_attend.data.text import map_out_of_vocabulary, normalize_text
from speech_attend.model.lm import APP, CharLM, LMConfig, save_lm

__all__ = ["fit_lm", "train_lm", "perplexity", "lm_sentences", "lm_sentences_of", "wordnet_lm_splits", "vocabulary_from"]


# --- Text ----------------------------------------------------------------------------------------


def wordnet_lm_splits() -> dict[str, list[str]]:
    """The WordNet sentences split as the spoken corpus splits them (train / dev / test)."""
    from speech_attend.builtin.wordnet_sentences import load_sentences, split_sentences

    return split_sentences(load_sentences())


def held_out(splits: dict[str, list[str]]) -> set[str]:
    """The dev and test sentences of :func:`wordnet_lm_splits`: never language-model text."""
    return set(splits["dev"]) | set(splits["test"])


# The examples are the kind of sentence people say to the recognizer; the definitions, four times
# their text, would drown them, so in ``wordnet+definitions`` each example counts this often.
EXAMPLE_REPEATS = 2
TEXT_SOURCES = ("wordnet", "wordnet+definitions")


def lm_sentences(source: str, vocabulary: Vocabulary) -> list[str]:
    """Training sentences for the language model.

    Args:
        source (str): ``wordnet`` (the WordNet *training* sentences; never dev or test),
            ``wordnet+definitions`` (those, each ``EXAMPLE_REPEATS`` times, and WordNet's
            definitions but those of the dev and test sentences' synsets:
            :func:`speech_attend.builtin.wordnet_sentences.wordnet_definitions`) or a UTF-8 text
            file, one sentence per line, normalised like the transcripts
            (:func:`speech_attend.data.text.normalize_text`).
        vocabulary (Vocabulary): characters outside it are dropped.

    Raises:
        ValueError: the file is missing, unreadable, or holds no sentence.
    """
    if source in TEXT_SOURCES:
        splits = wordnet_lm_splits()
        texts = splits["train"]
        if source == "wordnet+definitions":
            from speech_attend.builtin.wordnet_sentences import wordnet_definitions

            texts = texts * EXAMPLE_REPEATS + wordnet_definitions(held_out(splits))
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: text file not found (--text-from expects wordnet, wordnet+definitions or a .txt file, one sentence a line)"
            )
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
    charset = set(vocabulary.itos[len(SPECIALS) :])
    sentences = [map_out_of_vocabulary(t, charset) for t in texts]
    return [s for s in sentences if s]


def vocabulary_from(path: str | os.PathLike) -> Vocabulary:
    """The recognizer's vocabulary: from a ``.ckpt``, an exported folder, or a corpus folder
    (the characters of its ``train`` split, as :class:`~speech_attend.train.datamodule.SpeechDataModule`
    builds them with its default text settings)."""
    path = Path(path)
    if path.is_dir() and not (path / WEIGHTS_FILE).is_file() and not (path / CONFIG_FILE).is_file():
        from speech_attend.data.dataset import build_vocabulary
        from speech_attend.data.readers import read_corpus

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
    Ctrl-C or SIGTERM (what a scheduler sends before it ends a job) stops it after the current update, and the model
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
    bar = tqdm(
        total=max_steps if max_steps else round(seconds), unit="step" if max_steps else "s", desc="fit-lm", disable=not progress
    )
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
    record = {
        "steps": step,
        "epochs": epoch,
        "seconds": round(time.perf_counter() - start, 1),
        "losses": losses,
        "stopped": stop.requested,
    }
    return lm.cpu().eval(), record


class _StopRequest:
    """While inside, SIGINT and SIGTERM set ``requested`` instead of ending the process (main thread only)."""

    def __enter__(self) -> _StopRequest:
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
    out_dir: str | os.PathLike,
    text_from: str,
    vocabulary_source: str | os.PathLike,
    config: LMConfig = LMConfig(),
    seconds: float = 600.0,
    max_steps: int | None = None,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    dev_from: str = "wordnet",
    progress: bool = True,
    device: str = "cpu",
) -> dict:
    """``speech-attend fit-lm``: train on ``text_from`` over the vocabulary of ``vocabulary_source``,
    measure the perplexity on ``dev_from``, and write ``out_dir/lm.safetensors`` + ``lm.json``.

    Args:
        out_dir (str or PathLike): output folder (created; files there are replaced).
        text_from (str): ``wordnet`` (its training sentences), ``wordnet+definitions`` or a text file (:func:`lm_sentences`).
        vocabulary_source (str or PathLike): a ``.ckpt``, an exported folder or a corpus folder (:func:`vocabulary_from`).
        config (LMConfig, optional): architecture.
        seconds, max_steps, batch_size, lr, seed, progress, device: see :func:`fit_lm`.
        dev_from (str, optional): ``wordnet`` (its dev sentences), a text file, or ``none``. (Default: ``wordnet``)

    Returns:
        dict: the record saved in ``lm.json`` (text source, sentences, characters, steps,
        seconds, final training loss, dev perplexity, and ``dev_test_overlap``: training
        sentences that are WordNet dev or test sentences, which should be 0).
    """
    for name, value, low in (
        ("hidden", config.hidden, 1),
        ("layers", config.layers, 1),
        ("embedding", config.embedding_dim, 1),
        ("batch-size", batch_size, 1),
    ):
        if value < low:
            raise ValueError(f"--{name} must be at least {low}, got {value}")
    if not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"--dropout must be in [0, 1), got {config.dropout:g}")
    if not seconds > 0 or (max_steps is not None and max_steps < 1):
        raise ValueError(f"--minutes must be positive and --max-steps at least 1, got {seconds / 60:g} and {max_steps}")
    vocabulary = vocabulary_from(vocabulary_source)
    sentences = lm_sentences(text_from, vocabulary)
    record: dict[str, Any] = {
        "text_source": text_from if text_from in TEXT_SOURCES else str(Path(text_from).resolve()),
        "sentences": len(sentences),
        "characters": sum(len(s) + 1 for s in sentences),
    }
    dev: list[str] = []
    if dev_from == "wordnet":
        splits = wordnet_lm_splits()
        unseen = held_out(splits)
        record["dev_test_overlap"] = sum(s in unseen for s in sentences)
        dev = lm_sentences_of(splits["dev"], vocabulary)
    elif dev_from != "none":
        dev = lm_sentences(dev_from, vocabulary)
    lm, fit = fit_lm(sentences, vocabulary, config, seconds, max_steps, batch_size, lr, seed, progress, device)
    record.update(
        steps=fit["steps"],
        epochs=fit["epochs"],
        seconds=fit["seconds"],
        stopped_early=fit["stopped"],
        device=str(device),
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        train_loss=round(fit["losses"][-1], 4) if fit["losses"] else None,
        dev_source=dev_from,
        dev_sentences=len(dev),
        dev_perplexity=None,
    )
    save_lm(out_dir, lm, vocabulary, record)  # saved before the dev pass too: a stop during it keeps the model
    if dev:
        record["dev_perplexity"] = round(perplexity(lm, dev, vocabulary), 4)
        save_lm(out_dir, lm, vocabulary, record)
    return record
