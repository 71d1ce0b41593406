"""Captioning images with a trained model, and exporting models.

A model comes from a Lightning checkpoint or an exported folder (``model.safetensors`` +
``config.json``), both loaded without running pickled code (:mod:`shared.io.model_files`).
Images may be any size or mode Pillow reads; they are resized to the model's input size exactly
as in training. With an overlay folder each image gets one PNG: the image, then one panel per
word with that word's attention over the image (Xu et al. 2015, Fig. 2-3).

A model with a frozen pretrained encoder leaves those weights out of its files (see
:mod:`show_attend.model.encoder`); loading it rebuilds them from the published weights file, found
where training found it, or at ``encoder_weights``. No Lightning here.

:class:`Captioning` is the Python interface, read as ``speech_attend``'s :class:`Transcriber` is::

    captioning = Captioning.load("models/mine", device="cpu", beam_size=5)  # decoding settings replace the model's
    [result] = captioning.caption(["photo.jpg"])  # one CaptionResult per path, in order
    print(result.caption, result.score)
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import overload

import numpy as np
import torch

from shared import Hypothesis
from shared.io.config import as_dataclass, with_settings
from shared.io.devices import check_device
from shared.io.model_files import CheckpointError, export_folder, load_model_files
from show_attend.data.images import ImageError, image_transform, load_image
from show_attend.model.captioner import Captioner, DecodeConfig, build_captioner
from show_attend.model.encoder import EncoderConfig, EncoderWeightsError, restore_omitted_weights
from show_attend.model.migrations import migrate_hyper_parameters

__all__ = [
    "Captioning",
    "Beam",
    "CaptionResult",
    "load_captioner",
    "caption_files",
    "caption_images",
    "save_overlay",
    "export_model",
    "APP",
    "SHIPPED_MODEL",
    "shipped_model",
]

APP = "show-attend"
SHIPPED_MODEL = Path(__file__).resolve().parents[2] / "models" / "show_attend"  # where a shipped captioner would be
_OVERLAY_SIDE = 256  # overlays are drawn on the image scaled to at most this many pixels a side


@dataclass
class Beam:
    """One caption the beam search ended with.

    Attributes:
        tokens (list of str): its words.
        attention (torch.Tensor): one map per word `(T, gh, gw)`.
        score (float): its length-normalised log-probability, what the beams are ranked by.
    """

    tokens: list[str]
    attention: torch.Tensor
    score: float

    @property
    def caption(self) -> str:
        return " ".join(self.tokens)

    def to_json(self) -> dict:
        """``text`` (the caption), ``tokens`` and ``score``: one entry of ``--json``'s ``beams``."""
        return {"text": self.caption, "tokens": self.tokens, "score": _finite(self.score)}


@dataclass
class CaptionResult:
    """One captioned image.

    Attributes:
        image (Path): the file.
        tokens (list of str): the caption's words.
        attention (torch.Tensor): one map per word `(T, gh, gw)`.
        score (float): the caption's length-normalised log-probability (NaN when not known).
        others (list of Beam): the beam's next best captions, best first (with ``nbest`` > 1).
    """

    image: Path
    tokens: list[str]
    attention: torch.Tensor
    score: float = float("nan")
    others: list[Beam] = field(default_factory=list)

    @property
    def caption(self) -> str:
        return " ".join(self.tokens)

    @property
    def beams(self) -> list[Beam]:
        """Every caption the beam search ended with that was asked for, best first: this one, then ``others``."""
        return [Beam(self.tokens, self.attention, self.score), *self.others]

    def to_json(self, overlay: str | None = None) -> dict:
        """What ``caption --json`` prints for the image: ``image``, ``caption``, ``text`` (the same
        caption, under the key ``transcribe --json`` gives the transcript), ``tokens``, ``score``,
        ``beams`` (``text``, ``tokens``, ``score`` each, best first) and ``overlay`` (its PNG or null)."""
        return {
            "image": str(self.image),
            "caption": self.caption,
            "text": self.caption,
            "tokens": self.tokens,
            "score": _finite(self.score),
            "beams": [beam.to_json() for beam in self.beams],
            "overlay": overlay,
        }


def _finite(score: float) -> float | None:
    return score if math.isfinite(score) else None  # JSON has no NaN


class Captioning:
    """A trained captioner, captioning image files with its beam search: the Python face of
    ``show-attend caption``, as :class:`speech_attend.infer.transcribe.Transcriber` is of
    ``speech-attend transcribe``. ``Captioning.load(path, device=..., beam_size=...)`` loads one;
    this holds a loaded :class:`~show_attend.model.captioner.Captioner` and the decoding settings
    it captions with (the model's, less those replaced).

    Args:
        model (Captioner): a trained captioner (:func:`load_captioner`).
        batch_size (int, optional): images decoded together. (Default: ``16``)
        **decoding: settings that replace the model's :class:`DecodeConfig` (``beam_size``,
            ``max_length``, ``length_penalty``, ``max_repeats``); ``None`` keeps the model's.

    Raises:
        ValueError: a setting out of range, or one the model's decoding settings do not have.
    """

    def __init__(self, model: Captioner, batch_size: int = 16, **decoding):
        self.check_settings(decoding.get("beam_size"), decoding.get("max_length"), batch_size)
        self.model = model
        self.decoding = with_settings(model.decoding, **decoding)
        self.batch_size = batch_size

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        device: str | torch.device = "cpu",
        batch_size: int = 16,
        encoder_weights: str | None = None,
        **decoding,
    ) -> Captioning:
        """Load a model from a ``.ckpt`` file or an exported folder (``None``: the shipped one, if any).

        Args:
            path (str, Path or None): the model; ``None`` for :func:`shipped_model`. (Default: ``None``)
            device (str or torch.device, optional): ``cpu``, ``cuda`` or ``cuda:N``. (Default: ``"cpu"``)
            batch_size, **decoding: as for :class:`Captioning`.
            encoder_weights (str or None, optional): as for :func:`load_captioner`.

        Raises:
            ValueError: a device this machine lacks, or a setting out of range (before anything loads).
            CheckpointError: the model cannot be loaded (or none ships and ``path`` is ``None``).
        """
        device = check_device(device)
        cls.check_settings(decoding.get("beam_size"), decoding.get("max_length"), batch_size)
        with_settings(DecodeConfig(), **decoding)  # an unknown or out-of-range setting before the model loads
        model = load_captioner(shipped_model() if path is None else path, device, encoder_weights)
        return cls(model, batch_size, **decoding)

    @staticmethod
    def check_settings(beam_size: int | None = None, max_length: int | None = None, batch_size: int = 16) -> None:
        """Raises ValueError naming the first setting under 1 (as its ``caption`` option)."""
        for option, value in (("--beam-size", beam_size), ("--max-length", max_length), ("--batch-size", batch_size)):
            if value is not None and value < 1:
                raise ValueError(f"{option} must be >= 1, got {value}")

    @property
    def beam_size(self) -> int:
        return self.decoding.beam_size

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @overload
    def caption(self, paths: str | Path, nbest: int = 1) -> CaptionResult: ...
    @overload
    def caption(self, paths: Sequence[str | Path], nbest: int = 1) -> list[CaptionResult]: ...

    def caption(self, paths, nbest: int = 1):
        """Caption image files: a list of paths gives a list of results, in order; one path, one result.

        Args:
            paths (path or list of paths): image files (any format and size Pillow reads).
            nbest (int, optional): captions kept per image (``result.beams``), at most the beam size. (Default: ``1``)

        Raises:
            ImageError: an image is missing or unreadable (:meth:`caption_many` goes on past it).
        """
        one = isinstance(paths, (str, os.PathLike))
        results = []
        for result in self.caption_many([paths] if one else paths, nbest):
            if isinstance(result, ImageError):
                raise result
            results.append(result)
        return results[0] if one else results

    def caption_many(self, paths: Sequence[str | Path], nbest: int = 1) -> Iterator[CaptionResult | ImageError]:
        """Caption image files in order, a batch at a time; a file that cannot be read comes back as
        its :class:`ImageError`, in its place (:func:`caption_files`)."""
        if not 1 <= nbest <= self.beam_size:
            raise ValueError(f"nbest must be between 1 and the beam size {self.beam_size}, got {nbest}")
        return caption_files(self.model, list(paths), self.decoding, self.batch_size, nbest)


@torch.no_grad()
def caption_files(
    model: Captioner,
    paths: Sequence[str | Path],
    decoding: DecodeConfig | None = None,
    batch_size: int = 16,
    nbest: int = 1,
) -> Iterator[CaptionResult | ImageError]:
    """Caption image files with batched beam search, in order, a batch at a time.

    Yields, for each path, its :class:`CaptionResult`, or the :class:`ImageError` that says why
    the file could not be read (the other files are captioned all the same). Only one batch of
    images is in memory at a time. With ``nbest`` > 1 each result also holds the beam's next
    ``nbest - 1`` captions (``others``); the best is the same either way.

    Args:
        model (Captioner): a trained captioner.
        paths (list of paths): image files.
        decoding (DecodeConfig or None, optional): search settings; ``None``: the model's own.
        batch_size (int, optional): images decoded together. (Default: ``16``)
        nbest (int, optional): captions kept per image. (Default: ``1``)
    """
    transform = image_transform(model.config.image_size)
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
            for i, hyps in zip(good, model.search_nbest(model.encode(batch), nbest, decoding)):
                best, *others = [_beam(model, hyp) for hyp in hyps]
                captions[i] = CaptionResult(Path(chunk[i]), best.tokens, best.attention, best.score, others)
        for i in range(len(chunk)):
            yield captions.get(i, loaded[i])


def _beam(model: Captioner, hyp: Hypothesis) -> Beam:
    attention = hyp.attention.view(-1, *model.grid).cpu()  # (T, gh, gw)
    return Beam(model.vocabulary.decode(hyp.tokens), attention, hyp.normalized_score)


def caption_images(model: Captioner, paths: Sequence[str | Path], batch_size: int = 16, **decoding) -> list[CaptionResult]:
    """Caption image files; :func:`caption_files` as a list (:meth:`Captioning.caption`).

    Raises:
        ImageError: an image is missing or unreadable.
    """
    return Captioning(model, batch_size, **decoding).caption(list(paths))


def save_overlay(result: CaptionResult, path: str | Path) -> Path:
    """The image under its caption, then one attention panel per word, as one PNG."""
    from shared.evaluation.plots import save_caption_grid

    image = load_image(result.image)
    scale = _OVERLAY_SIDE / max(image.size)
    if scale < 1:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    return save_caption_grid(np.asarray(image), result.tokens, result.attention, path)


# ----------------------------------------------------------------------------- loading a model


def shipped_model() -> Path:
    """The shipped captioner's folder (what ``caption`` uses without ``--ckpt``).

    Raises:
        CheckpointError: none ships (this project ships a recognizer only, ``models/speech_attend``).
    """
    if not (SHIPPED_MODEL / "model.safetensors").is_file():
        raise CheckpointError(
            f"no captioner ships with the code ({SHIPPED_MODEL} is not there): give --ckpt, a .ckpt from "
            "`show-attend fit` or a folder from `show-attend export`"
        )
    return SHIPPED_MODEL


def load_captioner(path: str | Path, device: str | torch.device = "cpu", encoder_weights: str | None = None) -> Captioner:
    """A trained captioner, in eval mode, from a ``.ckpt`` file or an exported folder, with its
    ``vocabulary`` and ``decoding`` settings.

    Args:
        path (str or Path): the model file or folder.
        device (str or torch.device, optional): where the model runs. (Default: ``"cpu"``)
        encoder_weights (str or None, optional): the encoder's pretrained weights file, for a
            model that leaves them out; by default where training found them.

    Raises:
        CheckpointError: unreadable, unsafe, another app's, or whose encoder weights cannot be restored.
    """
    files = load_model_files(path, APP)  # CheckpointError names the file
    hparams = files.hyper_parameters
    if not hparams.get("vocabulary"):
        raise CheckpointError(f"{path}: not a show-attend model (no vocabulary in its config)")
    try:
        encoder = as_dataclass(EncoderConfig, hparams.get("encoder"))
        if files.omitted is None:  # every weight is in the file: never fetch pretrained weights
            encoder = replace(encoder, pretrained=False, weights_path=None)
        elif encoder_weights is not None:
            encoder = replace(encoder, weights_path=encoder_weights)
        model = build_captioner({**hparams, "encoder": asdict(encoder)})
    except EncoderWeightsError:  # it says how to give the weights
        raise
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: not a show-attend model config ({str(err).splitlines()[0]})") from None
    state_dict = dict(files.state_dict)
    if files.omitted is not None:
        restore_omitted_weights(state_dict, files.omitted, model.encoder, str(path))
    try:
        model.load_state_dict(state_dict)
    except RuntimeError as err:
        raise CheckpointError(
            f"{path}: weights do not fit the model its config describes ({str(err).splitlines()[0][:160]})"
        ) from None
    return model.to(device).eval()


# ----------------------------------------------------------------------------- exporting a model


def export_model(ckpt: str | Path, out_dir: str | Path, include_encoder: bool = False, beam_size: int | None = None) -> Path:
    """Write ``model.safetensors`` + ``config.json`` (hyper-parameters and vocabulary) to ``out_dir``.

    Args:
        ckpt (str or Path): a checkpoint written by ``fit`` (or an exported folder).
        out_dir (str or Path): the folder to write.
        include_encoder (bool, optional): also store frozen pretrained encoder weights, which are
            otherwise left out (restored from the published file when loaded). (Default: ``False``)
        beam_size (int or None, optional): beams, saved as ``caption``'s default; by default the
            checkpoint's (as ``speech-attend export --beam-size``).
    """
    Captioning.check_settings(beam_size)
    files = load_model_files(ckpt, APP)
    model = load_captioner(ckpt)
    state_dict = model.state_dict()
    omitted = None if include_encoder else files.omitted
    if omitted is not None:
        state_dict = {key: value for key, value in state_dict.items() if key not in set(omitted["keys"])}
    hparams = migrate_hyper_parameters(files.hyper_parameters)  # an export is written in the current layout
    hparams["decoding"] = asdict(with_settings(model.decoding, beam_size=beam_size))
    return export_folder(out_dir, APP, state_dict, hparams, omitted)
