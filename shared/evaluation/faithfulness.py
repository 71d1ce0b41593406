"""Attention against intervention: do the positions a step attended to decide its output?

An attention map says which values were mixed in strongly; whether a position *decided* the
output takes an intervention. Occlusion (Zeiler and Fergus 2014) removes one position at a time
and measures how far the log-probability of the output falls. This module compares the two maps
of one output step, over the same positions:

* the rank correlation of attention and occlusion drop (Spearman, ties averaged);
* whether the attention peak is among the ``k`` positions whose removal hurts most;
* the drop when the attention peak is removed, against the drop for a random position (the
  mean over all the others: what a random choice would give on average).

The apps compute the two maps (:mod:`show_attend.infer.explain`, :mod:`speech_attend.infer.explain`);
the comparison is the same for images and speech. Pure functions of tensors, no model here.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from shared.io.writes import writing

__all__ = ["MapComparison", "compare_maps", "rank_correlation", "write_explanations"]


@dataclass
class MapComparison:
    """How one step's attention map agrees with its occlusion map.

    Attributes:
        rank_correlation (float): Spearman's rho of the two maps; NaN when either is constant.
        peak_in_top (bool): the attention peak is among the ``top`` largest drops.
        attention_peak (int): the position with the most attention.
        occlusion_peak (int): the position whose removal lowers the output most.
        drop_at_attention_peak (float): the log-probability drop when the attention peak is removed.
        drop_at_random (float): the mean drop over the other positions.
    """

    rank_correlation: float
    peak_in_top: bool
    attention_peak: int
    occlusion_peak: int
    drop_at_attention_peak: float
    drop_at_random: float

    def to_json(self) -> dict:
        rho = None if math.isnan(self.rank_correlation) else round(self.rank_correlation, 4)
        return {
            "rank_correlation": rho,
            "attention_peak_in_top_occlusion": self.peak_in_top,
            "attention_peak": self.attention_peak,
            "occlusion_peak": self.occlusion_peak,
            "drop_at_attention_peak": round(self.drop_at_attention_peak, 4),
            "drop_at_random": round(self.drop_at_random, 4),
        }


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """Ranks 0..n-1 of a 1-D tensor, tied values sharing the mean of their ranks."""
    order = values.argsort()
    ranks = torch.empty_like(values, dtype=torch.float64)
    ranks[order] = torch.arange(values.numel(), dtype=torch.float64)
    for value in values.unique():  # ties: the few equal values of attention or of drops
        tied = values == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def rank_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation of two equally long maps (flattened); NaN if either is constant."""
    a, b = a.flatten().double(), b.flatten().double()
    if a.numel() != b.numel():
        raise ValueError(f"the maps must have as many positions, got {a.numel()} and {b.numel()}")
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = float(ra.norm() * rb.norm())
    return float((ra * rb).sum()) / denominator if denominator > 0 else math.nan


def compare_maps(attention: torch.Tensor, drops: torch.Tensor, top: int = 3) -> MapComparison:
    """Compare one step's attention with its occlusion drops (see the module docstring).

    Args:
        attention (torch.Tensor): weights over the positions, any shape `(...)`.
        drops (torch.Tensor): log-probability drop when each position is removed, same shape.
        top (int, optional): how many of the largest drops count as the occlusion's peak region.
            (Default: ``3``)
    """
    attention, drops = attention.flatten().float(), drops.flatten().float()
    if attention.shape != drops.shape:
        raise ValueError(f"attention and drops must cover the same positions, got {attention.numel()} and {drops.numel()}")
    peak = int(attention.argmax())
    others = torch.cat([drops[:peak], drops[peak + 1 :]])
    return MapComparison(
        rank_correlation=rank_correlation(attention, drops),
        peak_in_top=peak in drops.topk(min(top, drops.numel())).indices.tolist(),
        attention_peak=peak,
        occlusion_peak=int(drops.argmax()),
        drop_at_attention_peak=float(drops[peak]),
        drop_at_random=float(others.mean()) if others.numel() else math.nan,
    )


def write_explanations(
    results: Iterable[Any],
    out: Path,
    save: Callable[[Any, Path], Path],
    prog: str,
    positions: str,
    outputs: str,
    names: Sequence[str] | None = None,
) -> int:
    """Write what an ``explain`` command found, input by input, and print a line for each.

    Each explanation adds its outputs' lines to ``out/explain.jsonl`` and its picture to
    ``out/<name>.png``; an input that failed is one error line on stderr.

    Args:
        results (iterable): per input, an explanation (``source``: the input's path, ``text``: the
            model's output, ``outputs``: one entry per word or character with its ``comparison``,
            ``to_json()``: its lines), or the exception that input raised.
        out (Path): an existing folder.
        save (callable): draws an explanation into the given PNG path and returns that path.
        prog (str): the command's name, for error lines.
        positions (str): what an occluded position is called, plural ("cells", "spans").
        outputs (str): what an output is called, plural ("words", "characters").
        names (list of str or None, optional): the pictures' names, one per result in order
            (:func:`shared.io.outputs.output_names` of the inputs); by default each input's stem.

    Returns:
        int: 2 if an input failed, else 0.
    """
    status = 0
    jsonl = out / "explain.jsonl"
    with writing("the explanations", jsonl):
        lines = jsonl.open("w", encoding="utf-8")
    with lines:
        for index, result in enumerate(results):
            if isinstance(result, Exception):
                print(f"{prog}: error: {str(result).splitlines()[0]}", file=sys.stderr)
                status = 2
                continue
            with writing("the explanations", jsonl):  # only the writes: a failure of the model is its own
                for line in result.to_json():
                    lines.write(json.dumps(line, ensure_ascii=False) + "\n")
                lines.flush()
            name = result.source.stem if names is None else names[index]
            picture = save(result, out / f"{name}.png") if result.outputs else None
            agree = sum(output.comparison.peak_in_top for output in result.outputs)
            print(
                f"{result.source}: {result.text}  [attention peak among the 3 most decisive {positions} for {agree} of "
                f"{len(result.outputs)} {outputs}]" + (f"  [{picture}]" if picture else ""),
                flush=True,
            )
    return status
