"""One page for many captioned images: ``show-attend caption --html DIR`` writes ``DIR/index.html``.

Each image is shown with its caption. Hovering over a word (or clicking it, which keeps it shown)
draws that word's attention over the image as ``--overlay-dir`` does in its PNGs
(:func:`shared.evaluation.plots.overlay_attention`): the map min-max normalised, upsampled
smoothly, coloured with ``jet`` and blended with an opacity of 0.6 x its level. Below the caption
the beam's other captions are listed, best first, with their scores; their words show their own
attention. The page is one file: images are embedded as ``data:`` URIs and the script and style
are inline, so it opens from disk with no server and no network.

The attention is drawn on a transparent canvas laid over the image, from a `(gh, gw)` grid of
levels (0-255) per word; the image itself is never drawn on the canvas.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from shared.io.writes import replacing
from show_attend.data.images import load_image
from show_attend.infer.caption import Beam, CaptionResult

__all__ = ["write_gallery", "PAGE_NAME"]

PAGE_NAME = "index.html"
_SIDE = 320  # images are shown this many pixels on their longer side

_STYLE = """
body { font: 15px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .2em; }
.hint { color: #666; margin: 0 0 1.2em; }
main { display: flex; flex-wrap: wrap; gap: 1.5em; }
figure { margin: 0; width: 330px; }
.picture { position: relative; display: inline-block; }
.picture img { display: block; }
.picture canvas { position: absolute; inset: 0; width: 100%; height: 100%; pointer-events: none; }
.file { color: #666; font-size: .85em; overflow-wrap: anywhere; margin: .3em 0; }
ol { margin: 0; padding-left: 1.4em; }
li { margin: .15em 0; }
li:not(:first-child) { color: #555; font-size: .9em; }
li:first-child { font-size: 1.1em; }
.word { font: inherit; color: inherit; background: none; border: 0; padding: 0 .1em; cursor: pointer; border-radius: 3px; }
.word:hover, .word:focus { background: #ffe28a; outline: none; }
.word.kept { background: #ffc94a; }
.score { color: #999; font-size: .8em; margin-left: .4em; }
"""

_SCRIPT = """
const items = JSON.parse(document.getElementById("attention").textContent);

// jet, as matplotlib draws it: blue (0) - cyan - yellow - red (1)
const jet = (level, centre) => Math.round(255 * Math.min(1, Math.max(0, 1.5 - Math.abs(4 * level - centre))));

function draw(figure, word) {
  const canvas = figure.querySelector("canvas");
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  if (!word) return;
  const item = items[figure.dataset.item];
  const [rows, cols] = item.grid;
  const levels = item.beams[word.dataset.beam][word.dataset.word];  // rows * cols, 0-255
  const cells = new ImageData(cols, rows);
  levels.forEach((value, i) => {
    const level = value / 255;
    cells.data.set([jet(level, 3), jet(level, 2), jet(level, 1), Math.round(255 * 0.6 * level)], 4 * i);
  });
  const grid = document.createElement("canvas");
  grid.width = cols;
  grid.height = rows;
  grid.getContext("2d").putImageData(cells, 0, 0);
  context.imageSmoothingEnabled = true;
  context.imageSmoothingQuality = "high";
  context.drawImage(grid, 0, 0, canvas.width, canvas.height);  // upsampled smoothly
}

const figureOf = (word) => word.closest("figure");
const show = (word) => draw(figureOf(word), word);
const restore = (figure) => draw(figure, figure.querySelector(".word.kept"));  // the clicked word, if any

document.addEventListener("mouseover", (event) => {
  if (event.target.classList.contains("word")) show(event.target);
});
document.addEventListener("focusin", (event) => {
  if (event.target.classList.contains("word")) show(event.target);
});
document.addEventListener("mouseout", (event) => {
  if (event.target.classList.contains("word")) restore(figureOf(event.target));
});
document.addEventListener("click", (event) => {
  const word = event.target.closest(".word");
  if (!word) return;
  const before = figureOf(word).querySelector(".word.kept");
  if (before && before !== word) before.classList.remove("kept");
  word.classList.toggle("kept");  // a second click lets it go
  restore(figureOf(word));
});
"""


def write_gallery(results: Sequence[CaptionResult], folder: str | Path, title: str) -> Path:
    """Write ``folder/index.html``: every image with its caption, each word's attention on
    hover or click, and the beam's other captions below.

    Args:
        results (list of CaptionResult): the captioned images, in page order; ``others``
            holds the beam's other captions (``caption_files(..., nbest=K)``).
        folder (str or Path): where the page goes (made if missing).
        title (str): the page's heading, e.g. the model's path.

    Returns:
        Path: the page.
    """
    figures, items = [], []
    for index, result in enumerate(results):
        beams = [Beam(result.tokens, result.attention, result.score), *result.others]
        figures.append(_figure(index, result.image, beams))
        items.append(
            {"grid": list(result.attention.shape[1:]), "beams": [[_levels(grid) for grid in beam.attention] for beam in beams]}
        )
    data = json.dumps(items, separators=(",", ":")).replace("</", "<\\/")  # no "</script>" inside the script
    count = f"{len(results)} image{'s' if len(results) != 1 else ''}"
    page = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p class="hint">{count}. Point at a word to see where the model looked when it wrote it; click a word to keep it shown.
Under each caption: the beam's other captions, best first, each with its length-normalised log-probability.</p>
<main>
{"".join(figures) or "<p>No image could be captioned.</p>"}
</main>
<script id="attention" type="application/json">{data}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""
    path = Path(folder) / PAGE_NAME
    with replacing(path, "the gallery page") as temporary:  # whole, or a one-line error (a full disk)
        temporary.write_text(page, encoding="utf-8")
    return path


def _figure(index: int, image_path: Path, beams: list[Beam]) -> str:
    """One image: the picture with its overlay canvas, then the captions as lists of word buttons."""
    image = load_image(image_path)
    scale = _SIDE / max(image.size)  # a small image is stored as it is and shown larger
    width, height = max(1, round(image.width * scale)), max(1, round(image.height * scale))
    if scale < 1:
        image = image.resize((width, height))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    source = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    lines = []
    for b, beam in enumerate(beams):
        words = " ".join(
            f'<button class="word" data-beam="{b}" data-word="{t}">{html.escape(token)}</button>'
            for t, token in enumerate(beam.tokens)
        )
        score = (
            ""
            if math.isnan(beam.score)
            else f'<span class="score" title="length-normalised log-probability">{beam.score:.2f}</span>'
        )
        lines.append(f"<li>{words or '<i>(no words)</i>'}{score}</li>")
    name = html.escape(str(image_path))
    return f"""<figure data-item="{index}">
<div class="picture"><img src="{source}" width="{width}" height="{height}" alt="{name}"><canvas width="{width}" height="{height}"></canvas></div>
<figcaption><p class="file">{name}</p><ol>{"".join(lines)}</ol></figcaption>
</figure>
"""


def _levels(grid: torch.Tensor) -> list[int]:
    """One map `(gh, gw)` as levels 0-255, min-max normalised as the PNG overlays are (a constant map is all 0)."""
    grid = grid.float().flatten()
    span = float(grid.max() - grid.min())
    levels = (grid - grid.min()) / span if span > 0 else torch.zeros_like(grid)
    return [round(255 * float(level)) for level in levels]
