"""The captioner's built-in data: scenes of coloured shapes with exact captions.

Real caption data (COCO, Flickr) is large and needs downloading; these scenes are drawn in
seconds, and their captions follow a small regular grammar a small model can learn exactly,
so a run shows at once whether the captioner and its attention work: each word naming an
object should be emitted while the attention sits on that object (the ``words`` and ``box``
fields written beside every image make that checkable).

Layout. The image is cut into a 3x3 grid of cells; each object sits alone in its own cell,
at least a small margin from the cell's edges, so objects never overlap. Its horizontal place
in the cell is free; its vertical centre stays within a few pixels of the cell's centre, so
objects of one grid row are visibly level with each other and visibly above every object of
the next row.

Reading order (the rule the canonical caption follows): objects are sorted by their *row*,
the index of the horizontal band (``image_size / 3`` high) holding the centre of their box,
top to bottom, then by the left edge of their box, left to right. The layout keeps every box
inside one band with a margin, so no object lies near a band edge and the order never hangs on
a pixel.

Caption grammar (sentence 0, the canonical caption)::

    caption  := object (relation object)*
    object   := "a" SIZE COLOUR SHAPE
    relation := "left of"    if the next object is in the same row
              | "above"      if the next object is in a lower row

e.g. ``a big red circle left of a small blue square above a big green triangle``. Four
paraphrases follow it (sentences 1-4) so BLEU and CIDEr have several references: ``there is
...`` with ``to the left of``; the canonical caption without sizes; the objects in reverse
order with ``right of`` / ``below``; and ``A with B and C ...`` (for a lone object: ``a
single ...`` and ``a picture of ...``). All five use 28 words.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from tqdm.auto import tqdm

__all__ = [
    "SHAPES",
    "COLOURS",
    "SIZES",
    "ShapeObject",
    "Scene",
    "generate_scene",
    "parse_caption",
    "prepare_shapes",
]

SHAPES = ("circle", "square", "triangle", "diamond")
# Far apart in RGB from each other and from the grey background (grey levels 45..115).
COLOURS = {
    "red": (225, 35, 35),
    "green": (40, 190, 60),
    "blue": (45, 95, 235),
    "yellow": (245, 225, 40),
    "purple": (165, 60, 215),
    "orange": (250, 140, 15),
    "white": (245, 245, 245),
}
SIZES = ("small", "big")

_GRID = 3  # the layout grid is _GRID x _GRID cells, one object at most per cell
_BIG = 0.80  # side of a big object, as a fraction of a cell
_SMALL = 0.44  # side of a small object: about half a big one, clearly smaller at any scale
_MARGIN = 0.05  # least gap between an object and its cell's edge, as a fraction of a cell
_JITTER = 0.08  # how far an object's centre may leave its cell's centre vertically
_MIN_IMAGE_SIZE = 32
_SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class ShapeObject:
    """One drawn object.

    Args:
        shape (str): one of :data:`SHAPES`.
        colour (str): one of the keys of :data:`COLOURS`.
        size (str): one of :data:`SIZES`.
        box (tuple of int): ``(x0, y0, x1, y1)`` in pixels, end exclusive: every pixel of the
            object has ``x0 <= x < x1`` and ``y0 <= y < y1``, and the shape touches all four
            sides.
    """

    shape: str
    colour: str
    size: str
    box: tuple[int, int, int, int]

    def words(self) -> list[str]:
        """The tokens naming this object in the canonical caption, ``[size, colour, shape]``."""
        return [self.size, self.colour, self.shape]


@dataclass
class Scene:
    """One generated image with its objects and captions.

    Args:
        image (PIL.Image.Image): the RGB image, ``image_size x image_size``.
        objects (list of ShapeObject): the objects in reading order (see the module docstring).
        captions (list of list of str): tokenised captions; ``captions[0]`` is canonical.
        words (list of list of int): per object, the indices of the tokens of
            ``captions[0]`` that name it (its size, colour and shape).
    """

    image: Image.Image
    objects: list[ShapeObject]
    captions: list[list[str]]
    words: list[list[int]]


def _check_layout(image_size: int, max_objects: int) -> None:
    if image_size < _MIN_IMAGE_SIZE:
        raise ValueError(f"image_size must be at least {_MIN_IMAGE_SIZE} pixels, got {image_size}.")
    if not 1 <= max_objects <= _GRID * _GRID:
        raise ValueError(
            f"max_objects must be between 1 and {_GRID * _GRID} (one object per cell of the "
            f"{_GRID}x{_GRID} layout grid), got {max_objects}."
        )


def _band_edges(image_size: int) -> list[int]:
    """Pixel edges of the grid's rows (and columns): ``_GRID + 1`` increasing integers."""
    return [round(i * image_size / _GRID) for i in range(_GRID + 1)]


def _row(box: Sequence[int], image_size: int) -> int:
    """The row (band) of an object: the band holding the centre of its box."""
    centre = (box[1] + box[3]) / 2
    return min(int(centre * _GRID // image_size), _GRID - 1)


def _smooth_noise(rng: np.random.Generator, cells: int, std: float, size: int) -> np.ndarray:
    """Gaussian noise on a ``cells x cells`` grid, upsampled bicubically to `(size, size)`."""
    coarse = rng.normal(0.0, std, size=(cells, cells)).astype(np.float32)
    return np.asarray(Image.fromarray(coarse).resize((size, size), Image.Resampling.BICUBIC))


def _background(rng: np.random.Generator, image_size: int) -> np.ndarray:
    """A grey, lightly textured background, `(S, S, 3)` uint8.

    Two octaves of smooth noise (cloudy blotches and a finer mottle): enough texture that a
    model cannot find objects by "anything not flat". There is no per-pixel noise, which
    PNG compresses badly: the files would be several times larger and slower to write.
    """
    level = rng.uniform(60.0, 100.0)
    grey = level + _smooth_noise(rng, 4, 10.0, image_size) + _smooth_noise(rng, 16, 5.0, image_size)
    grey = np.clip(np.rint(grey), 45, 115).astype(np.uint8)  # (S, S)
    return np.repeat(grey[..., None], 3, axis=2)  # (S, S, 3)


def _draw(draw: ImageDraw.ImageDraw, obj: ShapeObject) -> None:
    x0, y0, x1, y1 = obj.box
    right, bottom = x1 - 1, y1 - 1  # PIL's boxes include their last pixel
    mid_x, mid_y = (x0 + right) / 2, (y0 + bottom) / 2
    fill = COLOURS[obj.colour]
    if obj.shape == "circle":
        draw.ellipse((x0, y0, right, bottom), fill=fill)
    elif obj.shape == "square":
        draw.rectangle((x0, y0, right, bottom), fill=fill)
    elif obj.shape == "triangle":  # pointing up, base on the bottom edge
        draw.polygon([(x0, bottom), (mid_x, y0), (right, bottom)], fill=fill)
    elif obj.shape == "diamond":
        draw.polygon([(mid_x, y0), (right, mid_y), (mid_x, bottom), (x0, mid_y)], fill=fill)
    else:
        raise ValueError(f"unknown shape {obj.shape!r}; expected one of {SHAPES}.")


def _place(rng: np.random.Generator, cell: int, side: int, edges: list[int], cell_size: float) -> tuple[int, int, int, int]:
    """A box of ``side`` pixels inside grid cell ``cell``, keeping the margin."""
    row, col = divmod(cell, _GRID)
    margin = max(1, round(_MARGIN * cell_size))
    left, right = edges[col] + margin, edges[col + 1] - margin - side
    top, bottom = edges[row] + margin, edges[row + 1] - margin - side
    x0 = int(rng.integers(left, right + 1))
    jitter = round(_JITTER * cell_size)
    centred = round((edges[row] + edges[row + 1] - side) / 2)
    y0 = int(np.clip(centred + rng.integers(-jitter, jitter + 1), top, bottom))
    return (x0, y0, x0 + side, y0 + side)


def _object_phrase(obj: ShapeObject, sizes: bool = True) -> list[str]:
    words = obj.words() if sizes else [obj.colour, obj.shape]
    # sizes never start with a vowel, so the canonical caption always says "a"
    return ["an" if words[0][0] in "aeiou" else "a"] + words


def _captions(objects: list[ShapeObject], image_size: int) -> tuple[list[list[str]], list[list[int]]]:
    """The canonical caption, its four paraphrases, and the word indices of each object."""
    rows = [_row(obj.box, image_size) for obj in objects]
    same_row = [rows[k] == rows[k + 1] for k in range(len(objects) - 1)]

    def chain(order: list[int], near: list[str], far: list[str], sizes: bool = True) -> list[str]:
        tokens = _object_phrase(objects[order[0]], sizes)
        for a, b in zip(order, order[1:]):
            tokens += near if same_row[min(a, b)] else far
            tokens += _object_phrase(objects[b], sizes)
        return tokens

    forward = list(range(len(objects)))
    canonical, words = [], []
    for k, obj in enumerate(objects):
        if k > 0:
            canonical += ["left", "of"] if same_row[k - 1] else ["above"]
        start = len(canonical) + 1  # after the article
        words.append([start, start + 1, start + 2])
        canonical += _object_phrase(obj)

    there_is = ["there", "is"] + chain(forward, ["to", "the", "left", "of"], ["above"])
    no_sizes = chain(forward, ["left", "of"], ["above"], sizes=False)
    if len(objects) == 1:
        reverse = ["a", "single"] + canonical[1:]
        listing = ["a", "picture", "of"] + canonical
    else:
        reverse = chain(forward[::-1], ["right", "of"], ["below"])
        listing = _object_phrase(objects[0]) + ["with"] + _object_phrase(objects[1])
        for obj in objects[2:]:
            listing += ["and"] + _object_phrase(obj)
    return [canonical, there_is, no_sizes, reverse, listing], words


def generate_scene(rng: np.random.Generator | int, image_size: int = 128, max_objects: int = 4) -> Scene:
    """Draw one random scene of 1 to ``max_objects`` shapes with its captions.

    Args:
        rng (np.random.Generator or int): the source of randomness (an int seeds a new one);
            the same generator state gives the same scene.
        image_size (int, optional): side of the square image in pixels, at least 32.
            (Default: ``128``)
        max_objects (int, optional): most objects per scene, 1 to 9; the count is uniform in
            ``1..max_objects``. (Default: ``4``)

    Returns:
        Scene: the image, its objects in reading order, captions and word indices.
    """
    _check_layout(image_size, max_objects)
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)

    edges = _band_edges(image_size)
    cell_size = image_size / _GRID
    narrowest = min(b - a for a, b in zip(edges, edges[1:]))
    margin = max(1, round(_MARGIN * cell_size))
    sides = {
        "big": min(round(_BIG * cell_size), narrowest - 2 * margin),
        "small": round(_SMALL * cell_size),
    }

    count = int(rng.integers(1, max_objects + 1))
    cells = sorted(int(c) for c in rng.choice(_GRID * _GRID, size=count, replace=False))
    colour_names = list(COLOURS)
    objects = []
    for cell in cells:  # cells ascend row by row, left to right: already reading order
        size = SIZES[int(rng.integers(len(SIZES)))]
        objects.append(
            ShapeObject(
                shape=SHAPES[int(rng.integers(len(SHAPES)))],
                colour=colour_names[int(rng.integers(len(colour_names)))],
                size=size,
                box=_place(rng, cell, sides[size], edges, cell_size),
            )
        )

    image = Image.fromarray(_background(rng, image_size))
    draw = ImageDraw.Draw(image)
    for obj in objects:
        _draw(draw, obj)
    captions, words = _captions(objects, image_size)
    return Scene(image=image, objects=objects, captions=captions, words=words)


def parse_caption(tokens: Sequence[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Read a canonical caption back into objects and relations (the grammar's inverse).

    Useful as a strict metric: a generated caption is exactly right when it parses and its
    objects and relations equal those of the reference.

    Args:
        tokens (list of str): a caption in the canonical grammar, without ``<start>``/``<end>``.

    Returns:
        (list of (size, colour, shape), list of str): the objects in order, and the relation
        between each consecutive pair (``"left of"`` or ``"above"``).

    Raises:
        ValueError: if ``tokens`` is not a canonical caption.
    """
    tokens = list(tokens)
    objects, relations, i = [], [], 0
    while True:
        phrase = tokens[i : i + 4]
        if len(phrase) != 4 or phrase[0] != "a" or phrase[1] not in SIZES or phrase[2] not in COLOURS or phrase[3] not in SHAPES:
            raise ValueError(f"expected 'a <size> <colour> <shape>' at token {i} of {' '.join(tokens)!r}.")
        objects.append((phrase[1], phrase[2], phrase[3]))
        i += 4
        if i == len(tokens):
            return objects, relations
        if tokens[i : i + 2] == ["left", "of"]:
            relations.append("left of")
            i += 2
        elif tokens[i] == "above":
            relations.append("above")
            i += 1
        else:
            raise ValueError(f"expected 'left of' or 'above' at token {i} of {' '.join(tokens)!r}.")


def _raw(tokens: list[str]) -> str:
    """Tokens as the raw sentence Karpathy's files carry: capitalised, with a full stop."""
    text = " ".join(tokens)
    return text[0].upper() + text[1:] + "."


def prepare_shapes(
    out_dir: str | Path,
    train: int = 6000,
    val: int = 300,
    test: int = 300,
    seed: int = 0,
    image_size: int = 128,
    max_objects: int = 4,
    progress: bool = True,
) -> Path:
    """Write a shapes data set in Karpathy's split format (like ``dataset_coco.json``).

    Images go to ``out_dir/images/shapes_<imgid>.png`` and the captions to
    ``out_dir/dataset_shapes.json``. Images are numbered train first, then val, then test.
    Each image is drawn from its own generator seeded by ``(seed, split, index in split)``,
    so the output is byte-identical for a seed, and the val and test images do not change
    when ``train`` does.

    Besides Karpathy's fields every image carries ``objects``: a list, in reading order, of
    ``{"shape", "colour", "size", "box": [x0, y0, x1, y1], "words": [i_size, i_colour,
    i_shape]}``, where ``box`` is in pixels (end exclusive) and ``words`` indexes the tokens
    of sentence 0.

    Args:
        out_dir (str or Path): output folder, created if needed.
        train (int, optional): number of training images. (Default: ``6000``)
        val (int, optional): number of validation images. (Default: ``300``)
        test (int, optional): number of test images. (Default: ``300``)
        seed (int, optional): the data set's seed. (Default: ``0``)
        image_size (int, optional): image side in pixels, at least 32. (Default: ``128``)
        max_objects (int, optional): most objects per image, 1 to 9. (Default: ``4``)
        progress (bool, optional): show a progress bar. (Default: ``True``)

    Returns:
        Path: the path of ``dataset_shapes.json``.
    """
    counts = {"train": train, "val": val, "test": test}
    for split, n in counts.items():
        if not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"{split} must be a non-negative number of images, got {n!r}.")
    if sum(counts.values()) == 0:
        raise ValueError("train, val and test are all 0: there is nothing to generate.")
    _check_layout(image_size, max_objects)

    out_dir = Path(out_dir)
    image_dir = out_dir / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    images, imgid, sentid = [], 0, 0
    with tqdm(total=sum(counts.values()), desc="shapes", disable=not progress) as bar:
        for split_index, split in enumerate(_SPLITS):
            for k in range(counts[split]):
                rng = np.random.default_rng([seed, split_index, k])
                scene = generate_scene(rng, image_size=image_size, max_objects=max_objects)
                filename = f"shapes_{imgid:06d}.png"
                # level 3: much faster to write than the default 6, for slightly larger files
                scene.image.save(image_dir / filename, compress_level=3)
                sentences = []
                for tokens in scene.captions:
                    sentences.append({"tokens": tokens, "raw": _raw(tokens), "imgid": imgid, "sentid": sentid})
                    sentid += 1
                images.append(
                    {
                        "filename": filename,
                        "imgid": imgid,
                        "split": split,
                        "sentids": [s["sentid"] for s in sentences],
                        "sentences": sentences,
                        "objects": [
                            {
                                "shape": obj.shape,
                                "colour": obj.colour,
                                "size": obj.size,
                                "box": list(obj.box),
                                "words": words,
                            }
                            for obj, words in zip(scene.objects, scene.words)
                        ],
                    }
                )
                imgid += 1
                bar.update()

    path = out_dir / "dataset_shapes.json"
    partial = path.with_suffix(".json.tmp")  # written whole, then renamed: never half a file
    data = {"dataset": "shapes", "images": images}
    partial.write_text(json.dumps(data, separators=(",", ":")))  # compact, as Karpathy's
    os.replace(partial, path)
    return path
