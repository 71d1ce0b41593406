"""Pointing accuracy: does the attention look at the object a word names? (shapes data only)

For every word of a generated caption that names an object's size, colour or shape, the step's
attention peak (the centre of the grid cell with the largest weight) must lie inside that
object's box. Which object a word names comes from the caption itself: its object phrases
(runs of size/colour/shape words, "a big red circle") are matched to the image's objects in
reading order, or in reverse order for the captions that list them backwards, whichever order
agrees with more of the words. Words of phrases beyond the image's objects count as misses.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from show_attend.builtin.shapes import COLOURS, SHAPES, SIZES

__all__ = ["pointing_hits", "ATTRIBUTE_WORDS"]

ATTRIBUTE_WORDS = frozenset(SHAPES) | frozenset(COLOURS) | frozenset(SIZES)


def _phrases(tokens: Sequence[str]) -> list[list[int]]:
    """Positions of each run of attribute words, in order."""
    phrases: list[list[int]] = []
    previous = -2
    for position, token in enumerate(tokens):
        if token in ATTRIBUTE_WORDS:
            if position == previous + 1:
                phrases[-1].append(position)
            else:
                phrases.append([position])
            previous = position
    return phrases


def _agreement(tokens: Sequence[str], phrases: list[list[int]], objects: list[dict]) -> int:
    attributes = [{obj.get("shape"), obj.get("colour"), obj.get("size")} for obj in objects]
    return sum(tokens[p] in attrs for phrase, attrs in zip(phrases, attributes) for p in phrase)


def pointing_hits(
    tokens: Sequence[str], attention: torch.Tensor, objects: list[dict], image_size: tuple[int, int]
) -> tuple[int, int]:
    """Count the attribute words whose attention peak lies in the named object's box.

    Args:
        tokens (list of str): the generated words.
        attention (torch.Tensor): one map per word `(T, gh, gw)`.
        objects (list of dict): the image's objects in reading order, each with ``box``
            ``[x0, y0, x1, y1]`` in pixels (end exclusive) and its ``shape``/``colour``/``size``.
        image_size ((int, int)): width and height of the image the boxes refer to.

    Returns:
        (int, int): words pointed at correctly, attribute words in all.
    """
    if attention.dim() != 3 or attention.size(0) != len(tokens):
        raise ValueError(f"need one (gh, gw) map per word: {len(tokens)} words, attention {tuple(attention.shape)}")
    phrases = _phrases(tokens)
    order = list(objects)
    if _agreement(tokens, phrases, order[::-1]) > _agreement(tokens, phrases, order):
        order = order[::-1]
    width, height = image_size
    _, gh, gw = attention.shape
    peaks = attention.flatten(1).argmax(1).tolist()
    hits = total = 0
    for k, phrase in enumerate(phrases):
        for position in phrase:
            total += 1
            if k >= len(order):
                continue
            row, col = divmod(peaks[position], gw)
            x, y = (col + 0.5) / gw * width, (row + 0.5) / gh * height  # the peak cell's centre, in pixels
            x0, y0, x1, y1 = order[k]["box"]
            hits += int(x0 <= x < x1 and y0 <= y < y1)
    return hits, total
