"""Collapse: a model that writes the same output for every input, or one word over and over.

A briefly trained or diverged captioner can caption every image "big big big big ..."; a
recognizer can give every utterance the same transcript. BLEU or WER only say "low"; these
measures say what happened, from the decoded outputs alone (no references):

* the **distinct share**: distinct outputs / outputs (1 when every input gets its own output);
* the **looping share**: the share of outputs that repeat one word, that is, have the same
  word :data:`LOOP_RUN` or more times in a row, or have :data:`LOOP_MIN_WORDS` words or more
  of which one word makes up more than half;
* the **most common share**: how many inputs got the single most common output.

:func:`collapse_warning` turns them into one sentence when most inputs get the same output or
most outputs loop. Words are what whitespace separates, for captions and transcripts alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

__all__ = ["LOOP_RUN", "LOOP_MIN_WORDS", "MIN_OUTPUTS", "OutputCollapse", "collapse_warning", "is_looping", "output_collapse"]

LOOP_RUN = 4  # the same word this many times in a row loops: real text repeats a word at most twice or thrice
LOOP_MIN_WORDS = 8  # an output this long loops when one word is more than half of it
MIN_OUTPUTS = 10  # fewer outputs say too little to warn about (and a sanity check has fewer)
MOST = 0.5  # "most inputs": the share above which collapse_warning speaks


@dataclass(frozen=True)
class OutputCollapse:
    """How varied a split's outputs are (see the module docstring).

    Attributes:
        outputs (int): outputs measured.
        distinct_share (float): distinct outputs / outputs.
        looping_share (float): outputs that repeat one word (:func:`is_looping`) / outputs.
        most_common (str): the most common output (the first seen among equals).
        most_common_share (float): inputs that got ``most_common`` / outputs.
        looping_example (str or None): the first output that loops, if any.
    """

    outputs: int
    distinct_share: float
    looping_share: float
    most_common: str
    most_common_share: float
    looping_example: str | None


def is_looping(text: str, run: int = LOOP_RUN, min_words: int = LOOP_MIN_WORDS) -> bool:
    """Whether ``text`` repeats one word: ``run`` or more times in a row, or, in an output of
    ``min_words`` words or more, as more than half of its words.

    Args:
        text (str): one output; words are what whitespace separates.
        run (int, optional): the run of one word that loops. (Default: :data:`LOOP_RUN`)
        min_words (int, optional): the shortest output the "more than half" rule applies to.
            (Default: :data:`LOOP_MIN_WORDS`)
    """
    words = text.split()
    if not words:
        return False
    if max(sum(1 for _ in group) for _, group in groupby(words)) >= run:
        return True
    return len(words) >= min_words and Counter(words).most_common(1)[0][1] * 2 > len(words)


def output_collapse(outputs: Sequence[str]) -> OutputCollapse:
    """The distinct, looping and most-common shares of a split's outputs.

    Args:
        outputs (sequence of str): one decoded output (caption, transcript) per input; at least one.

    Raises:
        ValueError: no outputs.
    """
    if not outputs:
        raise ValueError("output_collapse needs at least one output, got none")
    counts = Counter(outputs)
    most_common, count = counts.most_common(1)[0]
    loops = [text for text in outputs if is_looping(text)]
    return OutputCollapse(
        outputs=len(outputs),
        distinct_share=len(counts) / len(outputs),
        looping_share=len(loops) / len(outputs),
        most_common=most_common,
        most_common_share=count / len(outputs),
        looping_example=loops[0] if loops else None,
    )


def _shown(text: str, words: int = 3) -> str:
    """An output as the warning quotes it: its first few words, ``...`` if there are more."""
    split = text.split()
    if not split:
        return "(empty)"
    return "'" + " ".join(split[:words]) + (" ...'" if len(split) > words else "'")


def collapse_warning(collapse: OutputCollapse, stage: str, noun: str = "outputs") -> str | None:
    """One sentence naming the collapse, or ``None`` when the outputs look healthy.

    It speaks when most inputs (over half) get the same output, or most outputs loop, and
    there are at least ``MIN_OUTPUTS`` outputs.

    Args:
        collapse (OutputCollapse): from :func:`output_collapse`.
        stage (str): where the outputs come from, as the sentence starts ("validation", "test").
        noun (str, optional): what the outputs are called ("captions", "transcripts").
    """
    n = collapse.outputs
    if n < MIN_OUTPUTS:
        return None
    advice = "train longer or lower the learning rate"
    if collapse.most_common_share > MOST:
        return (
            f"{stage}: {collapse.most_common_share:.0%} of the {n} {noun} are the same one "
            f"({_shown(collapse.most_common)}): the model has collapsed; {advice}"
        )
    if collapse.looping_share > MOST:
        return (
            f"{stage}: {collapse.looping_share:.0%} of the {n} {noun} repeat one word over and over "
            f"(such as {_shown(collapse.looping_example or '')}): the model loops; {advice}"
        )
    return None
