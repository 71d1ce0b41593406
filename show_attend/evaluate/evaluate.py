"""The captioner scored on a split of a data set, without Lightning.

    show-attend evaluate --model MODEL --data DIR [--split test] [--beam-size N] [--json OUT]

The split's images are read as ``fit`` and ``test`` read the data set
(:func:`show_attend.data.readers.read_captions`: a manifest, an imagefolder or a Karpathy split
file), captioned with the model's beam search (:class:`show_attend.infer.caption.Captioning`,
batches of images), and scored against their references by
:func:`show_attend.evaluate.metrics.caption_metrics` (BLEU-1..4, ROUGE-L, CIDEr-D, and METEOR where
Java and its jar are found) and :func:`~show_attend.evaluate.metrics.exact_match`: what
``show-attend test`` reports of the same checkpoint, but its pointing accuracy and losses.
An image that cannot be read is left out and counted.
"""

from __future__ import annotations

import time
from pathlib import Path

from show_attend.data.readers import DataError, read_captions
from show_attend.evaluate.metrics import caption_metrics, exact_match
from show_attend.infer.caption import Captioning

__all__ = ["SPLITS", "evaluate", "report"]

SPLITS = ("train", "val", "test")


def evaluate(captioning: Captioning, data: str | Path, split: str = "test", meteor: bool = True) -> dict:
    """Caption every image of ``split`` and score the captions against the references.

    Args:
        captioning (Captioning): the model with its decoding (beam size, most words).
        data (str or Path): the data set's folder.
        split (str, optional): ``train``, ``val`` or ``test``. (Default: ``"test"``)
        meteor (bool, optional): try METEOR (seconds of JVM start-up). (Default: ``True``)

    Returns:
        dict: ``split``, ``images`` (scored), ``unreadable``, ``beam_size``, ``seconds`` and the metrics.

    Raises:
        DataError: no such split, or an empty one, or a data folder none of the layouts reads.
    """
    if split not in SPLITS:
        raise ValueError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    records, source = read_captions(data)
    records = [r for r in records if r.split == split]
    if not records:
        raise DataError(f"{source}: the {split} split is empty")
    start = time.perf_counter()
    hypotheses, references, unreadable = {}, {}, 0
    for record, result in zip(records, captioning.caption_many([r.path for r in records])):
        if isinstance(result, ValueError):  # ImageError: one bad file does not stop the others
            unreadable += 1
            continue
        key = str(record.path)
        hypotheses[key] = result.caption
        references[key] = [" ".join(tokens) for tokens in record.references]
    if not hypotheses:
        raise DataError(f"{source}: none of the {len(records)} images of the {split} split could be read")
    metrics = caption_metrics(hypotheses, references, meteor=meteor)
    return {
        "split": split,
        "images": len(hypotheses),
        "unreadable": unreadable,
        "beam_size": captioning.beam_size,
        "seconds": round(time.perf_counter() - start, 2),
        **metrics,
        "exact_match": exact_match(hypotheses, references),
    }


def report(results: dict) -> list[str]:
    """The scores as lines: one per metric (METEOR ``-`` when unavailable)."""
    lines = [
        f"{results['split']}: {results['images']} images, beam {results['beam_size']}"
        + (f" ({results['unreadable']} unreadable, left out)" if results["unreadable"] else "")
    ]
    for name in ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider", "exact_match"):
        value = results.get(name)
        lines.append(f"  {name:<12}{'-' if value is None else format(value, '.4f'):>8}")
    return lines
