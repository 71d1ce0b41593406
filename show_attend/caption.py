"""Captioning images with a trained model, and exporting models.

A model comes from a Lightning checkpoint or an exported folder (``model.safetensors`` +
``config.json``), both loaded without running pickled code (:mod:`shared.checkpoint`). Images
may be any size or mode Pillow reads; they are resized to the model's input size exactly as in
training. With an overlay folder each image gets one PNG: the image, then one panel per word
with that word's attention over the image (Xu et al. 2015, Fig. 2-3).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from shared.checkpoint import CheckpointError, export_folder, load_model_files

from .data import ImageError, image_transform, load_image
from .module import Captioner

__all__ = ["CaptionResult", "load_captioner", "caption_files", "caption_images", "save_overlay", "export_model", "EXPORT_FORMAT"]

EXPORT_FORMAT = "show_attend/1"
_OVERLAY_SIDE = 256  # overlays are drawn on the image scaled to at most this many pixels a side


@dataclass
class CaptionResult:
    """One captioned image.

    Attributes:
        image (Path): the file.
        tokens (list of str): the caption's words.
        attention (torch.Tensor): one map per word `(T, gh, gw)`.
    """

    image: Path
    tokens: list[str]
    attention: torch.Tensor

    @property
    def caption(self) -> str:
        return " ".join(self.tokens)


def load_captioner(path: str | Path, device: str | torch.device = "cpu") -> Captioner:
    """A trained captioner, in eval mode, from a ``.ckpt`` file or an exported folder."""
    state_dict, config = load_model_files(path)  # CheckpointError names the file
    if "las" in config and "decoder" not in config:
        raise CheckpointError(f"{path}: a speech-attend (recognizer) model; caption needs a show-attend model")
    accepted = set(inspect.signature(Captioner.__init__).parameters) - {"self"}
    config = {k: v for k, v in config.items() if k in accepted}
    if not config.get("vocabulary"):
        raise CheckpointError(f"{path}: not a show_attend model (no vocabulary in its config)")
    # The weights are all in the state dict: never download ImageNet weights again.
    config["encoder"] = {**(config.get("encoder") or {}), "pretrained": False, "weights_path": None}
    try:
        model = Captioner(**config)
        model.load_state_dict(state_dict)
    except (RuntimeError, TypeError) as err:
        raise CheckpointError(f"{path}: weights do not fit the model its config describes ({str(err).splitlines()[0][:160]})") from None
    return model.to(device).eval()


@torch.no_grad()
def caption_files(
    model: Captioner,
    paths: Sequence[str | Path],
    beam_size: int | None = None,
    max_length: int | None = None,
    batch_size: int = 16,
) -> Iterator[CaptionResult | ImageError]:
    """Caption image files with batched beam search, in order, a batch at a time.

    Yields, for each path, its :class:`CaptionResult`, or the :class:`ImageError` that says why
    the file could not be read (the other files are captioned all the same). Only one batch of
    images is in memory at a time.
    """
    transform = image_transform(model.hparams.image_size)
    device = next(model.parameters()).device
    for start in range(0, len(paths), batch_size):
        chunk = list(paths[start : start + batch_size])
        loaded: dict[int, torch.Tensor | ImageError] = {}
        for i, path in enumerate(chunk):
            try:
                loaded[i] = transform(load_image(path))
            except ImageError as err:
                loaded[i] = err
        good = [i for i, item in loaded.items() if isinstance(item, torch.Tensor)]
        captions: dict[int, CaptionResult] = {}
        if good:
            batch = torch.stack([loaded[i] for i in good]).to(device)  # (B, 3, S, S)
            for i, hyp in zip(good, model.generate(model.encoder(batch), beam_size, max_length)):
                attention = hyp.attention.view(-1, *model.encoder.grid).cpu()  # (T, gh, gw)
                captions[i] = CaptionResult(Path(chunk[i]), model.vocab.decode(hyp.tokens), attention)
        for i in range(len(chunk)):
            yield captions.get(i, loaded[i])


def caption_images(
    model: Captioner,
    paths: Sequence[str | Path],
    beam_size: int | None = None,
    max_length: int | None = None,
    batch_size: int = 16,
) -> list[CaptionResult]:
    """Caption image files; :func:`caption_files` as a list.

    Raises:
        ImageError: an image is missing or unreadable.
    """
    results = []
    for result in caption_files(model, paths, beam_size, max_length, batch_size):
        if isinstance(result, ImageError):
            raise result
        results.append(result)
    return results


def save_overlay(result: CaptionResult, path: str | Path) -> Path:
    """The image under its caption, then one attention panel per word, as one PNG."""
    from shared.plots import save_caption_grid

    image = load_image(result.image)
    scale = _OVERLAY_SIDE / max(image.size)
    if scale < 1:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    return save_caption_grid(np.asarray(image), result.tokens, result.attention, path)


def export_model(ckpt: str | Path, out_dir: str | Path) -> Path:
    """Write ``model.safetensors`` + ``config.json`` (hyper-parameters and vocabulary) to ``out_dir``."""
    model = load_captioner(ckpt)
    config = {"format": EXPORT_FORMAT, **dict(model.hparams)}
    return export_folder(out_dir, model.state_dict(), config)
