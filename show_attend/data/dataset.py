"""Caption data for training: records -> images + reference captions -> padded batches.

Training draws one of an image's references at random each time the image is seen, so an
epoch is one pass over the *images* (as in the paper's code), not over every caption. The
data module (:mod:`show_attend.train.datamodule`) serves the splits; with a frozen encoder it reads
features from :mod:`show_attend.data.feature_cache` instead of images.
"""

from __future__ import annotations


import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from shared import Vocabulary
from shared.io.bad_samples import BadSample, drop_bad_samples

from show_attend.data.images import ImageError, ImageTransform, image_size, load_image
from show_attend.data.readers import CaptionRecord

__all__ = ["build_vocabulary", "CaptionDataset", "collate"]


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

    An image that cannot be read comes back as a :class:`~shared.io.bad_samples.BadSample`, which
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
        ``batch_size`` (B) and ``skipped`` (the :class:`~shared.io.bad_samples.BadSample` markers); when
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
