"""Where the captioner looked for a word, against where the word came from.

For each word of the model's own caption, teacher-forced on that caption:

* the attention map ``alpha_t`` over the feature grid;
* the occlusion map: how far ``log p(word_t)`` falls when one cell of the grid is removed. In
  feature space (the default) the cell's annotation vector is replaced by the image's mean
  vector; in pixel space (``pixels=True``) the cell's patch of the image is set to the data
  set's mean colour (0 after normalisation) and the image encoded again;
* their comparison (:func:`shared.evaluation.faithfulness.compare_maps`): rank correlation,
  whether the attention peak is among the three cells that matter most, and the drop when the
  attention peak is removed against a random cell.

A high attention weight says only that a vector was mixed in strongly; the occlusion map says
what the word depended on. No Lightning here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from shared.evaluation.faithfulness import MapComparison, compare_maps
from show_attend.data.images import ImageError, image_transform, load_image
from show_attend.model.captioner import Captioner

__all__ = ["WordExplanation", "ImageExplanation", "word_log_probs", "occlusion_drops", "explain_image", "explain_files"]

_VARIANTS_PER_PASS = 64  # occluded copies scored at once


@dataclass
class WordExplanation:
    """One word: its attention and occlusion maps `(gh, gw)` and how they compare."""

    word: str
    attention: torch.Tensor
    drops: torch.Tensor
    comparison: MapComparison


@dataclass
class ImageExplanation:
    """The model's caption of one image, word by word."""

    image: Path
    words: list[WordExplanation]

    @property
    def caption(self) -> str:
        return " ".join(w.word for w in self.words)

    # What ``write_explanations`` reads, named alike for both apps.
    source = property(lambda self: self.image)
    text = property(lambda self: self.caption)
    outputs = property(lambda self: self.words)

    def to_json(self) -> list[dict]:
        return [
            {"image": str(self.image), "position": t, "word": w.word, **w.comparison.to_json()} for t, w in enumerate(self.words)
        ]


@torch.no_grad()
def word_log_probs(model: Captioner, features: torch.Tensor, tokens: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced ``log p(word_t)`` of a caption and the attention of each step.

    Args:
        model (Captioner): in eval mode.
        features (torch.Tensor): annotation vectors `(N, L, D)`: copies of one image, or several.
        tokens (list of int): the caption's word ids (no ``<sos>``/``<eos>``), the same for all rows.

    Returns:
        (torch.Tensor, torch.Tensor): log-probabilities `(N, T)` of the ``T`` words and attention `(N, T, L)`.
    """
    rows, cells = features.shape[:2]
    if not tokens:  # the model ended at once: no word to explain
        return features.new_zeros(rows, 0), features.new_zeros(rows, 0, cells)
    sequence = torch.tensor([model.vocabulary.sos_id, *tokens], device=features.device).expand(rows, -1)  # (N, T + 1)
    out = model.score(features, sequence)
    return out.log_probs, out.alphas.float()


@torch.no_grad()
def occlusion_drops(model: Captioner, features: torch.Tensor, tokens: Sequence[int], masks: torch.Tensor) -> torch.Tensor:
    """How far each word's log-probability falls when the cells of each mask are removed
    (replaced by the image's mean annotation vector).

    Args:
        model (Captioner): in eval mode.
        features (torch.Tensor): one image's annotation vectors `(1, L, D)`.
        tokens (list of int): the caption's word ids.
        masks (torch.Tensor): bool `(M, L)`, ``True`` at the cells to remove; one row per intervention.

    Returns:
        torch.Tensor: drops `(M, T)`; positive where the word became less likely.
    """
    base, _ = word_log_probs(model, features, tokens)  # (1, T)
    mean = features.mean(1, keepdim=True)  # (1, 1, D): the image with nothing in particular anywhere
    drops = []
    for chunk in masks.split(_VARIANTS_PER_PASS):
        variants = torch.where(chunk[:, :, None].to(features.device), mean, features)  # (m, L, D)
        drops.append(base - word_log_probs(model, variants, tokens)[0])
    return torch.cat(drops)  # (M, T)


@torch.no_grad()
def _pixel_drops(model: Captioner, image: torch.Tensor, tokens: Sequence[int]) -> torch.Tensor:
    """Drops `(L, T)` when each grid cell's patch of the normalised image `(3, S, S)` is set to 0."""
    gh, gw = model.grid
    size = image.size(-1)
    base, _ = word_log_probs(model, model.encode(image[None]), tokens)
    drops = []
    for start in range(0, gh * gw, _VARIANTS_PER_PASS):
        cells = range(start, min(start + _VARIANTS_PER_PASS, gh * gw))
        variants = image[None].repeat(len(cells), 1, 1, 1)  # (m, 3, S, S)
        for k, cell in enumerate(cells):
            row, col = divmod(cell, gw)
            variants[k, :, row * size // gh : (row + 1) * size // gh, col * size // gw : (col + 1) * size // gw] = 0.0
        drops.append(base - word_log_probs(model, model.encode(variants), tokens)[0])
    return torch.cat(drops)


@torch.no_grad()
def explain_image(
    model: Captioner, image: torch.Tensor, path: Path, beam_size: int | None = None, pixels: bool = False
) -> ImageExplanation:
    """Caption one normalised image `(3, S, S)` and explain each word (module docstring)."""
    features = model.encode(image[None])  # (1, L, D)
    tokens = model.search(features, beam_size=beam_size)[0].tokens
    _, attention = word_log_probs(model, features, tokens)  # (1, T, L)
    cells = features.size(1)
    if pixels:
        drops = _pixel_drops(model, image, tokens)
    else:
        drops = occlusion_drops(model, features, tokens, torch.eye(cells, dtype=torch.bool))  # (L, T): one cell at a time
    grid = model.grid
    words = []
    for t, word in enumerate(model.vocabulary.decode(tokens, strip_specials=False)):
        weights, drop = attention[0, t].cpu(), drops[:, t].cpu()
        words.append(WordExplanation(word, weights.view(grid), drop.view(grid), compare_maps(weights, drop)))
    return ImageExplanation(path, words)


def explain_files(
    model: Captioner, paths: Sequence[str | Path], beam_size: int | None = None, pixels: bool = False
) -> Iterator[ImageExplanation | ImageError]:
    """Explain image files in order; an unreadable file comes back as its :class:`ImageError`."""
    transform = image_transform(model.config.image_size)
    device = next(model.parameters()).device
    for path in paths:
        try:
            image = transform(load_image(path)).to(device)
        except ImageError as err:
            yield err
            continue
        yield explain_image(model, image, Path(path), beam_size, pixels)


def save_explanation(explanation: ImageExplanation, path: str | Path) -> Path:
    """One PNG: for each word, its attention map beside its occlusion map, over the image."""
    from shared.evaluation.plots import save_attention_and_occlusion

    image = load_image(explanation.image)
    attention = torch.stack([w.attention for w in explanation.words]) if explanation.words else torch.zeros(0, 1, 1)
    drops = torch.stack([w.drops for w in explanation.words]) if explanation.words else torch.zeros(0, 1, 1)
    return save_attention_and_occlusion(image, [w.word for w in explanation.words], attention, drops, path)
