"""Pictures of attention: heat maps over images, alignment plots for speech, training curves.

Everything draws on a bare :class:`matplotlib.figure.Figure`, which renders with the Agg
canvas: no display is needed, and no pyplot state survives a call (long training runs that
plot every epoch do not leak figures).

The picture Show, Attend and Tell made famous (Xu et al. 2015, Fig. 2-3) is one panel per
generated word, the word's attention map upsampled to the image and laid over it:
:func:`overlay_attention` draws one panel and :func:`save_caption_grid` the whole figure.
For speech, Listen, Attend and Spell (Chan et al. 2016, Fig. 2) shows the alignment between
output characters and input frames: :func:`save_alignment`.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from shared.io.writes import replacing

__all__ = [
    "overlay_attention",
    "save_caption_grid",
    "save_attention_and_occlusion",
    "save_alignment",
    "save_alignment_and_occlusion",
    "save_curves",
    "save_lines",
]

_CMAP = "jet"  # the colour map of the paper's figures; its hot end stands out on photos


def _to_numpy(array: Any) -> np.ndarray:
    """Return ``array`` (numpy, torch tensor or nested lists) as a float32 numpy array."""
    if hasattr(array, "detach"):  # a torch tensor; duck-typed so plotting never imports torch
        array = array.detach().float().cpu().numpy()
    return np.asarray(array, dtype=np.float32)


def _to_rgb(image: np.ndarray | Image.Image) -> np.ndarray:
    """Return ``image`` as an `(H, W, 3)` uint8 array, or raise ValueError."""
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(
            f"image must be an (H, W, 3) uint8 array or a PIL image, "
            f"got an array of shape {tuple(image.shape)} and dtype {image.dtype}."
        )
    return image


@contextmanager
def _boxes_for_missing_glyphs() -> Iterator[None]:
    """Draw characters the font lacks (a Japanese file name in a title) as boxes, without
    matplotlib's warning per character, which would bury a command's own output."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font", category=UserWarning)
        yield


def _save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG: whole, or (a full disk) not at all, with a one-line error."""
    path = Path(path)
    with _boxes_for_missing_glyphs(), replacing(path, "the picture") as temporary:
        fig.savefig(temporary, format="png")
    return path


def overlay_attention(image: np.ndarray | Image.Image, weights: Any, alpha: float = 0.6) -> np.ndarray:
    """Blend one attention map over the image it attended to.

    The map is upsampled smoothly (bicubic) to the image size, min-max normalised to 0..1 by
    the grid's range, coloured with the ``jet`` colour map and blended over the image with an
    opacity of ``alpha * level`` per pixel: the attended region takes the map's hot colour,
    and where the weight is lowest the image shows through unchanged. A constant map (no preference
    for any location) therefore leaves the image as it is.

    Args:
        image (np.ndarray or PIL.Image.Image): the image, `(H, W, 3)` uint8.
        weights (np.ndarray or torch.Tensor): attention over the feature grid, `(gh, gw)`;
            any non-negative scale (probabilities or raw scores after softmax).
        alpha (float, optional): opacity of the map where the weight peaks. (Default: ``0.6``)

    Returns:
        np.ndarray: the blended image, `(H, W, 3)` uint8.
    """
    rgb = _to_rgb(image)
    grid = _to_numpy(weights)
    if grid.ndim != 2:
        raise ValueError(f"weights must be a (gh, gw) grid, got shape {tuple(grid.shape)}.")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}.")
    height, width = rgb.shape[:2]
    # PIL resizes float ("F" mode) images. Bicubic overshoots near a sharp peak, so the
    # levels are normalised by the grid's own range and clipped, not by the smoothed range.
    smooth = Image.fromarray(np.ascontiguousarray(grid)).resize((width, height), Image.Resampling.BICUBIC)
    low, high = float(grid.min()), float(grid.max())
    if high - low > 1e-12:
        level = np.clip((np.asarray(smooth) - low) / (high - low), 0.0, 1.0)
    else:
        level = np.zeros((height, width), dtype=np.float32)
    colour = matplotlib.colormaps[_CMAP](level)[..., :3]  # (H, W, 3) in 0..1
    opacity = (alpha * level)[..., None]  # (H, W, 1)
    blended = (1.0 - opacity) * (rgb / 255.0) + opacity * colour
    return np.clip(np.rint(blended * 255.0), 0, 255).astype(np.uint8)


def save_caption_grid(
    image: np.ndarray | Image.Image,
    words: Sequence[str],
    weights: Any,
    path: str | Path,
    cols: int = 5,
) -> Path:
    """Save one PNG: the image under its caption, then one attention panel per word.

    Args:
        image (np.ndarray or PIL.Image.Image): the image, `(H, W, 3)` uint8.
        words (list of str): the generated words, one per decoding step (``T`` of them).
        weights (np.ndarray or torch.Tensor): the attention maps, `(T, gh, gw)`; map ``t``
            is the attention used to emit ``words[t]``.
        path (str or Path): where to write the PNG; parent folders are created.
        cols (int, optional): panels per row. (Default: ``5``)

    Returns:
        Path: ``path``.
    """
    rgb = _to_rgb(image)
    maps = _to_numpy(weights)
    if maps.ndim != 3:
        raise ValueError(f"weights must have shape (T, gh, gw), got {tuple(maps.shape)}.")
    if len(words) != maps.shape[0]:
        raise ValueError(f"need one attention map per word: got {len(words)} words and {maps.shape[0]} maps.")
    if cols < 1:
        raise ValueError(f"cols must be at least 1, got {cols}.")

    panels = 1 + len(words)
    cols = min(cols, panels)
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(2.4 * cols, 2.6 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes:
        ax.set_axis_off()
    axes[0].imshow(rgb)
    caption = " ".join(words)
    axes[0].set_title(textwrap.fill(caption, width=28), fontsize=8)
    for ax, word, grid in zip(axes[1:], words, maps):
        ax.imshow(overlay_attention(rgb, grid))
        ax.set_title(word, fontsize=10)
    return _save(fig, path)


def save_attention_and_occlusion(
    image: np.ndarray | Image.Image,
    words: Sequence[str],
    attention: Any,
    drops: Any,
    path: str | Path,
    words_per_row: int = 4,
) -> Path:
    """Save one PNG: for each word, where the model looked (attention) beside what the word
    depended on (occlusion: the log-probability drop when each cell is removed), both over the image.

    Args:
        image (np.ndarray or PIL.Image.Image): the image, `(H, W, 3)` uint8.
        words (list of str): the caption's words (``T``).
        attention (np.ndarray or torch.Tensor): `(T, gh, gw)`.
        drops (np.ndarray or torch.Tensor): `(T, gh, gw)`; negative drops (the word became more
            likely) show as no drop.
        path (str or Path): where to write the PNG.
        words_per_row (int, optional): word pairs per row. (Default: ``4``)
    """
    rgb = _to_rgb(image)
    maps, losses = _to_numpy(attention), _to_numpy(drops)
    if maps.ndim != 3 or maps.shape != losses.shape or maps.shape[0] != len(words):
        raise ValueError(f"need (T, gh, gw) attention and drops for {len(words)} words, got {maps.shape} and {losses.shape}")
    cols = 2 * max(1, min(words_per_row, len(words)))
    rows = max(1, math.ceil(2 * len(words) / cols))
    fig = Figure(figsize=(2.0 * cols, 2.3 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes:
        ax.set_axis_off()
    for t, word in enumerate(words):
        left, right = axes[2 * t], axes[2 * t + 1]
        left.imshow(overlay_attention(rgb, maps[t]))
        left.set_title(f"{word}: attention", fontsize=8)
        right.imshow(overlay_attention(rgb, np.clip(losses[t], 0.0, None)))
        right.set_title(f"{word}: occlusion", fontsize=8)
    return _save(fig, path)


def _draw_alignment(
    fig: Figure,
    ax: Any,
    matrix: np.ndarray,
    output_labels: Sequence[str] | None,
    frame_seconds: float | None,
    cmap: str = "viridis",
) -> None:
    """Output steps down the y axis, input time along the x axis, with a colour bar."""
    t_out, t_in = matrix.shape
    x_end = t_in * frame_seconds if frame_seconds is not None else t_in
    # extent puts frame i over [i, i+1) (or seconds) and output step t centred on row t.
    image = ax.imshow(
        matrix, aspect="auto", origin="upper", interpolation="nearest", cmap=cmap, extent=(0.0, x_end, t_out - 0.5, -0.5)
    )
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01)
    ax.set_xlabel("time (s)" if frame_seconds is not None else "input frame")
    ax.set_ylabel("output step")
    if output_labels is not None:
        ax.set_yticks(range(t_out))
        ax.set_yticklabels(["␣" if label == " " else label for label in output_labels], fontsize=7)


def save_alignment(
    weights: Any,
    path: str | Path,
    output_labels: Sequence[str] | None = None,
    frame_seconds: float | None = None,
    title: str | None = None,
) -> Path:
    """Save the alignment between output tokens and input frames as a heat map.

    Output tokens run down the y axis, input time along the x axis; a good speech alignment
    is a thin, monotonic diagonal.

    Args:
        weights (np.ndarray or torch.Tensor): attention weights, `(T_out, T_in)`.
        path (str or Path): where to write the PNG; parent folders are created.
        output_labels (list of str or None, optional): one label per output step (characters;
            a space is drawn as ``"␣"`` so it stays visible). (Default: ``None``, step numbers)
        frame_seconds (float or None, optional): duration of one input frame after any
            downsampling (e.g. ``0.08`` for 10 ms frames reduced 8x by a pyramidal listener);
            the x axis is then in seconds. (Default: ``None``, the x axis counts frames)
        title (str or None, optional): figure title, wrapped to the figure's width (at most
            three lines). (Default: ``None``)

    Returns:
        Path: ``path``.
    """
    matrix = _to_numpy(weights)
    if matrix.ndim != 2:
        raise ValueError(f"weights must have shape (T_out, T_in), got {tuple(matrix.shape)}.")
    t_out, t_in = matrix.shape
    if output_labels is not None and len(output_labels) != t_out:
        raise ValueError(f"need one label per output step: got {len(output_labels)} labels for {t_out} steps.")
    if frame_seconds is not None and frame_seconds <= 0:
        raise ValueError(f"frame_seconds must be positive, got {frame_seconds}.")

    width = min(max(t_in / 12.0, 6.0), 24.0)
    height = min(max(t_out * 0.18, 3.0), 24.0)
    fig = Figure(figsize=(width, height), layout="constrained")
    _draw_alignment(fig, fig.subplots(), matrix, output_labels, frame_seconds)
    if title:
        _fitted_suptitle(fig, title)
    return _save(fig, path)


def _fitted_suptitle(fig: Figure, title: str, fontsize: float = 11.0, max_lines: int = 3) -> None:
    """Set ``title`` over the figure, wrapped to its width and cut to ``max_lines`` lines ("…").

    A file name has no spaces to wrap at, so long words are broken too. Lines are first cut at
    the width of an average character, then measured and narrowed until they fit, because wide
    characters (W, CJK) take more room. Centred on the figure, not on the axes: the axes sit
    left of the colour bar, so a title as wide as the figure would run off its left edge there.
    """
    renderer = FigureCanvasAgg(fig).get_renderer()
    room = 0.96 * fig.bbox.width  # pixels
    columns = max(8, int(room / (0.6 * fontsize * fig.dpi / 72)))  # an average character: 0.6 em
    while True:
        lines = textwrap.wrap(title, columns, max_lines=max_lines, placeholder=" …")
        text = fig.suptitle("\n".join(lines), fontsize=fontsize)
        with _boxes_for_missing_glyphs():
            width = text.get_window_extent(renderer).width
        if columns == 8 or width <= room:
            return
        columns = max(8, int(columns * 0.85))


def save_alignment_and_occlusion(
    weights: Any,
    drops: Any,
    path: str | Path,
    output_labels: Sequence[str] | None = None,
    frame_seconds: float | None = None,
    title: str | None = None,
) -> Path:
    """Save one PNG: the alignment (attention of each output step over time) beside the
    occlusion map (the log-probability drop of each output step when a span of input frames is
    removed), on the same axes.

    Args:
        weights (np.ndarray or torch.Tensor): attention `(T_out, T_in)`.
        drops (np.ndarray or torch.Tensor): drops `(T_out, T_in)`; negative drops show as none.
        path, output_labels, frame_seconds, title: as :func:`save_alignment`.
    """
    matrix, losses = _to_numpy(weights), _to_numpy(drops)
    if matrix.ndim != 2 or matrix.shape != losses.shape:
        raise ValueError(f"weights and drops must both be (T_out, T_in), got {matrix.shape} and {losses.shape}.")
    t_out, t_in = matrix.shape
    if output_labels is not None and len(output_labels) != t_out:
        raise ValueError(f"need one label per output step: got {len(output_labels)} labels for {t_out} steps.")
    width = min(max(t_in / 6.0, 10.0), 30.0)
    height = min(max(t_out * 0.18, 3.0), 24.0)
    fig = Figure(figsize=(width, height), layout="constrained")
    left, right = fig.subplots(1, 2)
    _draw_alignment(fig, left, matrix, output_labels, frame_seconds)
    left.set_title("attention", fontsize=9)
    _draw_alignment(fig, right, np.clip(losses, 0.0, None), output_labels, frame_seconds, cmap="magma")
    right.set_title("occlusion: log-probability drop", fontsize=9)
    if title:
        _fitted_suptitle(fig, title)
    return _save(fig, path)


def save_curves(
    series: dict[str, Sequence[tuple[float, float]]],
    path: str | Path,
    title: str | None = None,
) -> Path:
    """Save training curves, one subplot per series, stacked with a shared step axis.

    Args:
        series (dict of str to list of (step, value)): e.g.
            ``{"train/loss": [(0, 4.1), (100, 2.3)], "val/bleu4": [(1000, 12.0)]}``.
        path (str or Path): where to write the PNG; parent folders are created.
        title (str or None, optional): figure title. (Default: ``None``)

    Returns:
        Path: ``path``.
    """
    if not series:
        raise ValueError("series must hold at least one named curve, got an empty dict.")
    fig = Figure(figsize=(7.0, 2.2 * len(series) + 0.6), layout="constrained")
    axes = fig.subplots(len(series), 1, squeeze=False, sharex=True).ravel()
    for ax, (name, points) in zip(axes, series.items()):
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        if len(points) == 0:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            continue
        data = np.asarray(points, dtype=np.float64)
        if data.ndim != 2 or data.shape[1] != 2:
            raise ValueError(f"series {name!r} must be a list of (step, value) pairs.")
        # a marker keeps curves with one or two points (e.g. early validation) visible
        ax.plot(data[:, 0], data[:, 1], marker="." if len(data) < 50 else None)
    axes[-1].set_xlabel("step")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def save_lines(
    series: dict[str, Sequence[tuple[float, float]]],
    path: str | Path,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
) -> Path:
    """Save one plot with a line per named series, e.g. a metric against input length per model.

    Args:
        series (dict of str to list of (x, y)): one entry per line (its legend label).
        path (str or Path): where to write the PNG; parent folders are created.
        xlabel (str): the x axis's label. ylabel (str): the y axis's label.
        title (str or None, optional): figure title. (Default: ``None``)
    """
    if not series:
        raise ValueError("series must hold at least one named line, got an empty dict.")
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    for name, points in series.items():
        data = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        ax.plot(data[:, 0], data[:, 1], marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        fig.suptitle(title)
    return _save(fig, path)
