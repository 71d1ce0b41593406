"""Reading images safely (EXIF orientation, truncated or oversized files, one-line errors) and the
transform that turns one into the encoder's input tensor.
"""

from __future__ import annotations

import io
import os
import re
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError
from torchvision import transforms


__all__ = ["ImageError", "load_image", "load_image_bytes", "image_size", "image_transform", "ImageTransform", "IMAGENET_MEAN", "IMAGENET_STD"]


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_TURNED_ORIENTATIONS = (5, 6, 7, 8)  # EXIF orientations that swap width and height
_FILE_OBJECT = re.compile(r" ?<_io\.BytesIO object at 0x[0-9a-fA-F]+>")


class ImageError(ValueError):
    """An image file that is missing or cannot be decoded; the message names the file."""


def load_image(path: str | Path) -> Image.Image:
    """Any Pillow-readable image as 8-bit RGB, upright: turned as its EXIF orientation says (as
    viewers show phone photos), greyscale repeated, alpha composited on white, 16-bit and 32-bit
    images scaled down to 8 bits.

    Raises:
        ImageError: missing, empty, not an image, truncated, or more pixels than Pillow's guard
            against decompression bombs allows (twice ``PIL.Image.MAX_IMAGE_PIXELS``).
    """
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise ImageError(f"{path}: a broken link (to {os.readlink(path)}); expected an image file")
    if not path.is_file():
        raise ImageError(f"{path}: image not found")
    return _decode(path, path)


def load_image_bytes(data: bytes, name: str) -> Image.Image:
    """:func:`load_image` of a file's bytes already read (a shard's item); errors name ``name``.

    Raises:
        ImageError: empty, not an image, truncated, or too large to read safely.
    """
    if not data:
        raise ImageError(f"{name}: file is empty (0 bytes); expected an image file")
    return _decode(io.BytesIO(data), name)


def _decode(source: Path | io.BytesIO, path: Path | str) -> Image.Image:
    """The image of ``source`` (a file or its bytes) as upright 8-bit RGB; errors name ``path``."""
    try:
        with _open(source) as image:
            image.load()
            ImageOps.exif_transpose(image, in_place=True)
            if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
                pixels = np.asarray(image, dtype=np.float32)
                top = 65535.0 if image.mode.startswith("I;16") or pixels.max() > 255 else 255.0
                image = Image.fromarray(np.clip(pixels / top * 255.0 + 0.5, 0, 255).astype(np.uint8))
            if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
                rgba = image.convert("RGBA")
                background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                return Image.alpha_composite(background, rgba).convert("RGB")
            return image.convert("RGB")
    except Image.DecompressionBombError as err:
        raise ImageError(f"{path}: too large to read safely ({err})") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise _unreadable_image(path, err) from None


def image_size(path: str | Path) -> tuple[int, int]:
    """``(width, height)`` of an image as shown (after its EXIF orientation), from its header,
    without decoding the pixels.

    Raises:
        ImageError: missing, not an image, or too large to read (see :func:`load_image`).
    """
    try:
        with _open(path) as image:
            width, height = image.size
            turned = image.getexif().get(ExifTags.Base.Orientation, 1) in _TURNED_ORIENTATIONS
            return (height, width) if turned else (width, height)
    except Image.DecompressionBombError as err:
        raise ImageError(f"{path}: too large to read safely ({err})") from None
    except (OSError, SyntaxError, ValueError) as err:  # UnidentifiedImageError is an OSError
        raise _unreadable_image(path, err) from None


@contextmanager
def _open(path: str | Path | io.BytesIO) -> Iterator[Image.Image]:
    """``Image.open`` without Pillow's decompression-bomb warning: images between its limit and
    twice the limit (where it raises) are real photos too (cameras reach 150 megapixels), and the
    warning is two lines of noise on a command line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        with Image.open(path) as image:
            yield image


def _unreadable_image(path: str | Path, err: Exception) -> ImageError:
    """One line for any error Pillow raises: the file, then the first line of Pillow's words."""
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    reason = _FILE_OBJECT.sub("", reason)  # Pillow names bytes from a shard by their Python object
    return ImageError(f"{path}: not a readable image ({reason})")


class ImageTransform:
    """PIL image -> normalised `(3, S, S)` tensor, in two stages so the first can be kept.

    ``resize`` (PIL image -> PIL image of ``S x S``) and ``to_tensor`` (-> the normalised
    tensor); calling the object runs both. The whole image is resized to a square (nothing
    cropped away that a caption may mention). Augmentation is a mild crop and colour jitter;
    never a flip, which would swap "left" and "right" in the captions.

    Args:
        image_size (int): the side ``S``.
        augment (bool): random crop and colour jitter in ``resize``. (Default: ``False``)
    """

    def __init__(self, image_size: int, augment: bool = False):
        self.random = augment
        self.resize: Callable[[Image.Image], Image.Image] = transforms.Resize((image_size, image_size), antialias=True)
        if augment:
            self.resize = transforms.Compose([
                transforms.RandomResizedCrop(image_size, scale=(0.85, 1.0), ratio=(0.9, 1.1), antialias=True),
                transforms.ColorJitter(0.2, 0.2, 0.2),
            ])
        self.to_tensor = transforms.Compose([transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])

    def __call__(self, image: Image.Image) -> torch.Tensor:
        return self.to_tensor(self.resize(image))


def image_transform(image_size: int, augment: bool = False) -> ImageTransform:
    """The :class:`ImageTransform` for ``image_size`` (PIL image -> normalised `(3, S, S)` tensor)."""
    return ImageTransform(image_size, augment)
