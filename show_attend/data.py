"""Caption data: Karpathy split files, images, vocabulary, batches.

One reader serves every data set the captioner knows, because they all come as a Karpathy
split file (``dataset_coco.json``, ``dataset_flickr8k.json``, ``dataset_flickr30k.json``, or the
built-in ``dataset_shapes.json`` from :mod:`show_attend.shapes`)::

    {"images": [{"filename": "...jpg", "filepath": "val2014",    # filepath: COCO only
                 "split": "train|val|test|restval",               # restval joins train
                 "sentences": [{"tokens": ["a", "dog"], "raw": "A dog."}, ...],
                 "objects": [{"box": [x0, y0, x1, y1], "words": [1, 2, 3]}, ...]}]}  # shapes only

Images live under ``filepath/filename`` or just ``filename`` in an image folder, which
:func:`find_image_dir` finds among the layouts the data sets come in (``Images/`` and
``Flicker8k_Dataset/`` for Flickr8k, ``flickr30k-images/``, ``train2014/`` beside
``val2014/`` for COCO, ``images/`` for the built-in shapes, or the data folder itself).

Training draws one of an image's references at random each time the image is seen, so an
epoch is one pass over the *images* (as in the paper's code), not over every caption. The
data module (:mod:`show_attend.datamodule`) serves the splits; with a frozen encoder it reads
features from :mod:`show_attend.feature_cache` instead of images.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError
from torch.utils.data import Dataset
from torchvision import transforms

from shared import Vocabulary
from shared.training.bad_samples import BadSample, drop_bad_samples

__all__ = [
    "DataError",
    "ImageError",
    "CaptionRecord",
    "read_karpathy",
    "find_karpathy_file",
    "load_image",
    "image_size",
    "image_transform",
    "ImageTransform",
    "build_vocabulary",
    "CaptionDataset",
    "collate",
    "find_image_dir",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
]

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_SPLITS = {"train": "train", "restval": "train", "val": "val", "test": "test"}  # restval folds into train
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_TURNED_ORIENTATIONS = (5, 6, 7, 8)  # EXIF orientations that swap width and height


class DataError(ValueError):
    """A malformed split file or data folder; the message names the file and entry."""


class ImageError(ValueError):
    """An image file that is missing or cannot be decoded; the message names the file."""


@dataclass
class CaptionRecord:
    """One image and its reference captions.

    Args:
        path (Path): the image file.
        split (str): ``train``, ``val`` or ``test`` (``restval`` already folded into ``train``).
        references (list of list of str): tokenised, lower-case reference captions.
        objects (list of dict): shapes data only: per object ``box`` (pixels) and ``words``
            (indices into ``references[0]``).
    """

    path: Path
    split: str
    references: list[list[str]]
    objects: list[dict] = field(default_factory=list)


def _tokens(sentence: dict) -> list[str]:
    tokens = sentence.get("tokens")
    if isinstance(tokens, list) and tokens:
        return [str(t).lower() for t in tokens]
    return _WORD.findall(str(sentence.get("raw", "")).lower())


def read_karpathy(json_path: str | Path, image_dir: str | Path) -> list[CaptionRecord]:
    """Read a Karpathy-format split file (COCO, Flickr8k/30k or shapes form).

    Args:
        json_path (str or Path): the ``dataset_*.json`` file.
        image_dir (str or Path): folder holding the images (COCO: holding the ``filepath`` folders).

    Returns:
        list of CaptionRecord: in file order; ``restval`` images are in the ``train`` split.

    Raises:
        DataError: the file is missing, not JSON, or an entry lacks a field (the message names
            the entry).
    """
    json_path, image_dir = Path(json_path), Path(image_dir)
    try:
        data = json.loads(json_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{json_path}: split file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{json_path}: not valid JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise DataError(f"{json_path}: expected a Karpathy split file, a JSON object with an 'images' list")
    records = []
    for i, entry in enumerate(data["images"]):
        where = f"{json_path}: images[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
            raise DataError(f"{where}: expected an object with a 'filename' string")
        where += f" ({entry['filename']})"
        split = _SPLITS.get(entry.get("split"))
        if split is None:
            raise DataError(f"{where}: 'split' is {entry.get('split')!r}; expected train, val, test or restval")
        sentences = entry.get("sentences")
        if not isinstance(sentences, list) or not all(isinstance(s, dict) for s in sentences):
            raise DataError(f"{where}: expected a 'sentences' list of objects with 'tokens' or 'raw'")
        references = [tokens for tokens in map(_tokens, sentences) if tokens]
        if not references:
            raise DataError(f"{where}: no sentence has any words")
        path = image_dir / entry.get("filepath", "") / entry["filename"]
        records.append(CaptionRecord(path, split, references, list(entry.get("objects") or [])))
    return records


def find_karpathy_file(data_dir: str | Path) -> Path:
    """The one ``dataset_*.json`` in ``data_dir``."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(
            f"{data_dir}: data folder not found (for the built-in data run `show-attend prepare shapes --out {data_dir}`)"
        )
    found = sorted(data_dir.glob("dataset_*.json"))
    if len(found) != 1:
        what = "no dataset_*.json" if not found else f"{len(found)} dataset_*.json files"
        raise DataError(f"{data_dir}: found {what}; set data.json_file to the Karpathy split file")
    return found[0]


# Image folders as the data sets unpack, searched in this order when data.image_dir is not set.
IMAGE_FOLDERS = ("images", "Images", "Flicker8k_Dataset", "Flickr8k_Dataset", "flickr30k-images", "flickr30k_images", ".")
_PROBE = 20  # records looked up to recognise the image folder


def find_image_dir(data_dir: str | Path, records: list[CaptionRecord], image_dir: str | Path | None = None) -> Path:
    """The folder that holds the images of ``records`` (paths relative to it, as read).

    Args:
        data_dir (str or Path): the data set's folder.
        records (list of CaptionRecord): as :func:`read_karpathy` returns them for ``image_dir="."``.
        image_dir (str or Path or None): the folder the configuration names; relative to
            ``data_dir`` unless absolute. ``None`` tries :data:`IMAGE_FOLDERS` under ``data_dir``.

    Raises:
        DataError: the named folder is missing, or no candidate holds any of the first images.
    """
    data_dir = Path(data_dir)
    probe = [r.path for r in records[:_PROBE]]
    candidates = [data_dir / image_dir] if image_dir is not None else [data_dir / name for name in IMAGE_FOLDERS]
    for folder in candidates:
        if folder.is_dir() and any((folder / path).is_file() for path in probe):
            return folder
    if image_dir is not None and not candidates[0].is_dir():
        raise DataError(f"{candidates[0]}: image folder not found (data.image_dir); expected the folder holding {probe[0].name}")
    looked = ", ".join(str(c) for c in candidates if c.is_dir()) or "no candidate folder exists"
    raise DataError(
        f"{data_dir}: none of the first {len(probe)} images of the split file is there (looked for {probe[0]} in: "
        f"{looked}); set data.image_dir to the folder holding them"
    )


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
    try:
        with _open(path) as image:
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
def _open(path: str | Path) -> Iterator[Image.Image]:
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


def build_vocabulary(records: list[CaptionRecord], min_freq: int = 5, max_size: int | None = None) -> Vocabulary:
    """Vocabulary of the words of the training captions (all references of each image)."""
    return Vocabulary.build(
        (tokens for r in records if r.split == "train" for tokens in r.references), min_freq=min_freq, max_size=max_size
    )


class CaptionDataset(Dataset):
    """Images with captions for one split.

    Args:
        records (list of CaptionRecord): the split's images.
        vocabulary (Vocabulary): maps words to ids.
        transform (ImageTransform): PIL image -> `(3, S, S)` tensor.
        train (bool): draw a random reference each time; otherwise always the first.
        max_caption_length (int): longer captions are cut to this many words.
        features (np.ndarray or None): cached encoder features `(N, L, D)` used instead of images.
        keep_images (bool): keep each image after its first read, decoded and resized (about
            ``3 * S * S`` bytes each), so later epochs skip the file; only with a transform
            that is not random. The tensors are the same as without. (Default: ``False``)

    An image that cannot be read comes back as a :class:`~shared.training.bad_samples.BadSample`, which
    :func:`collate` drops and the training loop logs; one bad file does not end an epoch.
    """

    def __init__(
        self,
        records: list[CaptionRecord],
        vocabulary: Vocabulary,
        transform: ImageTransform,
        train: bool,
        max_caption_length: int = 50,
        features: np.ndarray | None = None,
        keep_images: bool = False,
    ):
        if keep_images and transform.random:
            raise ValueError("keep_images needs a transform that is not random (no augmentation)")
        self.records, self.vocabulary, self.transform = records, vocabulary, transform
        self.train, self.max_caption_length, self.features = train, max_caption_length, features
        self.unreadable: dict[int, str] = {}  # index -> reason, for images the feature cache could not read
        self.kept: dict[int, tuple[Image.Image, tuple[int, int]]] | None = {} if keep_images else None

    def __len__(self) -> int:
        return len(self.records)

    def _image(self, index: int) -> tuple[torch.Tensor, tuple[int, int]]:
        """The image as a tensor, and its original (width, height)."""
        if self.kept is not None and index in self.kept:
            resized, size = self.kept[index]
        else:
            image = load_image(self.records[index].path)
            resized, size = self.transform.resize(image), image.size
            if self.kept is not None:
                self.kept[index] = resized, size
        return self.transform.to_tensor(resized), size

    def __getitem__(self, index: int) -> dict | BadSample:
        record = self.records[index]
        if index in self.unreadable:
            return BadSample(str(record.path), self.unreadable[index])
        choice = int(torch.randint(len(record.references), ())) if self.train else 0
        words = record.references[choice][: self.max_caption_length]
        item = {"index": index, "caption": torch.tensor(self.vocabulary.encode(words, add_sos=True, add_eos=True))}
        try:
            if self.features is not None:
                item["features"] = torch.from_numpy(np.asarray(self.features[index], dtype=np.float32))
                if not self.train and record.objects:  # pointing accuracy needs the original size
                    item["size"] = image_size(record.path)
            else:
                item["image"], item["size"] = self._image(index)
        except ImageError as err:  # skipped and logged by shared.training.guards.SkipBadSamples
            return BadSample(str(record.path), str(err).removeprefix(f"{record.path}: "))
        if not self.train:
            item["references"] = [" ".join(tokens) for tokens in record.references]
            item["key"] = str(record.path)
            item["objects"] = record.objects
        return item


def collate(items: list[dict | BadSample]) -> dict:
    """Stack a list of items into a batch, longest caption first, leaving out unreadable ones.

    Returns:
        dict: ``captions`` `(B, T + 1)` (``<sos>`` ... ``<eos>``, padded with 0), ``lengths`` `(B,)`
        (targets per caption, ``<eos>`` included), ``index`` `(B,)`, and either ``images``
        `(B, 3, S, S)` or ``features`` `(B, L, D)`; evaluation batches also carry the lists
        ``references``, ``keys``, ``objects`` and ``sizes`` (original width, height). Always
        ``batch_size`` (B) and ``skipped`` (the :class:`~shared.training.bad_samples.BadSample` markers); when
        every item was unreadable, only those two.
    """
    items, skipped = drop_bad_samples(items)
    if not items:
        return {"batch_size": 0, "skipped": skipped}
    items = sorted(items, key=lambda item: -len(item["caption"]))  # longest first: the decoder drops ended captions
    captions = [item["caption"] for item in items]
    batch = {
        "batch_size": len(items),
        "skipped": skipped,
        "captions": torch.nn.utils.rnn.pad_sequence(captions, batch_first=True, padding_value=0),
        "lengths": torch.tensor([len(c) - 1 for c in captions]),
        "index": torch.tensor([item["index"] for item in items]),
    }
    if "features" in items[0]:
        batch["features"] = torch.stack([item["features"] for item in items])
    else:
        batch["images"] = torch.stack([item["image"] for item in items])
    if "references" in items[0]:
        batch["sizes"] = [item.get("size") for item in items]
        for key, name in (("references", "references"), ("key", "keys"), ("objects", "objects")):
            batch[name] = [item[key] for item in items]
    return batch
