"""Model files: safe checkpoints and exported folders, loaded without running anyone's code.

Two formats carry a trained model, and both say which app wrote them (``attend/1`` format, app
``show-attend`` or ``speech-attend``), so a loader names the other app's model for what it is:

* a Lightning checkpoint (``.ckpt``), loaded with ``torch.load(weights_only=True)``: only
  tensors and plain Python containers are accepted, so a crafted pickle is refused before
  anything in it runs. The apps keep their hyper-parameters and vocabularies as plain
  dicts/lists so their checkpoints pass this check; the tag is a top-level ``attend`` entry;
* an exported folder: ``model.safetensors`` (the model's weights) plus ``config.json``::

      {"format": "attend/1", "app": "speech-attend", "hyper_parameters": {...}}

  with the same hyper-parameters a checkpoint holds (settings, vocabulary). Nothing in it is
  executable.

Either may leave out weights that a published file restores exactly (a frozen pretrained image
encoder): then it records their names and fingerprint under ``omitted_weights``, and the app
puts them back when loading.

:func:`load_model_files` takes either and returns the model's weights and hyper-parameters.
No Lightning here: inference imports this module.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch

from .writes import replacing

__all__ = [
    "CheckpointError",
    "safe_torch_load",
    "model_tag",
    "check_app_tag",
    "export_folder",
    "load_model_files",
    "ModelFiles",
    "OMITTED_KEY",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "FORMAT",
    "fingerprint",
]

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
FORMAT = "attend/1"
_TAG_KEY = "attend"  # a checkpoint's entry holding the tag
OMITTED_KEY = "omitted_weights"  # {"keys": model state-dict keys left out, "fingerprint": their hash}
_APP_NAMES = {"show-attend": "a show-attend (captioner) model", "speech-attend": "a speech-attend (recognizer) model"}


def fingerprint(tensors: Mapping[str, torch.Tensor]) -> str:
    """A short hash of named tensors (names, shapes, dtypes and values), independent of device."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


class CheckpointError(ValueError):
    """A checkpoint or exported folder that cannot be (safely) loaded."""


# What torch.save writes: a zip archive, or (legacy format) a pickle starting with its PROTO opcode.
_CHECKPOINT_STARTS = (b"PK\x03\x04", b"\x80")
# Files people pass as --ckpt by mistake, named in the error instead of an unpickler's complaint.
_KNOWN_STARTS = {
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"RIFF": "a RIFF (WAV) file",
    b"fLaC": "a FLAC file",
    b"OggS": "an Ogg file",
    b"ID3": "an MP3 file",
    b"{": "JSON text",
}


def _not_a_checkpoint(path: Path) -> str | None:
    """Why ``path`` cannot be a torch.save file, judged by its first bytes, or ``None`` if it may be."""
    with path.open("rb") as f:
        head = f.read(8)
    if head.startswith(_CHECKPOINT_STARTS):
        return None
    kind = next((name for start, name in _KNOWN_STARTS.items() if head.startswith(start)), None)
    if kind is None:
        kind = "text" if all(32 <= b < 127 or b in b"\t\r\n" for b in head) else f"bytes {head[:4]!r}"
    return f"not a PyTorch checkpoint: torch.save writes a zip archive, and this file starts like {kind}"


def safe_torch_load(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """``torch.load`` that refuses pickled code, with errors that name the file.

    Raises:
        CheckpointError: missing, empty, corrupt, or holding objects other than tensors and
            plain containers (e.g. a crafted pickle).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: checkpoint is empty")
    reason = _not_a_checkpoint(path)
    if reason is not None:  # the unpickler would call a PNG "objects other than tensors"
        raise CheckpointError(f"{path}: {reason}")
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else "unsupported content"
        raise CheckpointError(
            f"{path}: refused to load; it holds objects other than tensors and plain data, "
            f"which could run code ({first_line[:160]})"
        ) from None
    except Exception as err:  # noqa: BLE001  arbitrary bytes make the unpickler raise anything (IndexError, EOFError, ...)
        message = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
        reason = f"{type(err).__name__}: {message}" if message else type(err).__name__  # "KeyError: 101", not "101"
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({reason})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a checkpoint dictionary, found {type(data).__name__}")
    return data


def model_tag(app: str) -> dict[str, dict[str, str]]:
    """The entry that marks a checkpoint as ``app``'s: ``{"attend": {"format": ..., "app": ...}}``."""
    if app not in _APP_NAMES:
        raise ValueError(f"unknown app {app!r}; expected one of {', '.join(_APP_NAMES)}")
    return {_TAG_KEY: {"format": FORMAT, "app": app}}


def check_app_tag(tagged: dict, app: str, where: str | Path) -> None:
    """Raise :class:`CheckpointError` unless ``tagged`` (a checkpoint, or an exported config's
    ``{"format", "app"}``) is an ``attend/1`` model of ``app``."""
    tag = tagged.get(_TAG_KEY, tagged)
    found_format, found_app = tag.get("format"), tag.get("app")
    if found_format != FORMAT or found_app not in _APP_NAMES:
        raise CheckpointError(
            f"{where}: not an attend model (no '{FORMAT}' format tag); expected a file written by {app} fit or export"
        )
    if found_app != app:
        verb = "caption" if app == "show-attend" else "transcribe"
        raise CheckpointError(f"{where}: {_APP_NAMES[found_app]}; {verb} needs a {app} model")


class ModelFiles(NamedTuple):
    """What a model file holds: the model's weights (keys without the LightningModule's
    ``model.`` prefix), its hyper-parameters, and the record of weights it left out, if any."""

    state_dict: dict[str, torch.Tensor]
    hyper_parameters: dict[str, Any]
    omitted: dict[str, Any] | None


def export_folder(
    out_dir: str | Path,
    app: str,
    state_dict: dict[str, torch.Tensor],
    hyper_parameters: dict[str, Any],
    omitted: dict[str, Any] | None = None,
    files: tuple[str, str] = (WEIGHTS_FILE, CONFIG_FILE),
) -> Path:
    """Write ``model.safetensors`` and ``config.json`` (format tag, app, hyper-parameters, and
    the record of left-out weights) into ``out_dir`` (created if needed). ``files`` names the
    weights and config files otherwise (a second model beside the first: a language model)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    weights_file, config_file = files
    # safetensors refuses tensors that share memory; contiguous clones are always accepted.
    with replacing(out / weights_file, "the exported weights") as temporary:  # whole, or the old file stays
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in state_dict.items()}, str(temporary))
    config = {**model_tag(app)[_TAG_KEY], "hyper_parameters": hyper_parameters}
    if omitted:
        config[OMITTED_KEY] = omitted
    with replacing(out / config_file, "the exported config") as temporary:
        temporary.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def load_model_files(path: str | Path, app: str, files: tuple[str, str] = (WEIGHTS_FILE, CONFIG_FILE)) -> ModelFiles:
    """The model's weights and hyper-parameters from a Lightning checkpoint or an exported folder.

    A checkpoint's state dict is its LightningModule's; the model's weights are those under
    ``model.``, returned without that prefix, as an exported folder stores them.

    Args:
        path (str or Path): a ``.ckpt`` file or a folder written by ``export``.
        app (str): ``show-attend`` or ``speech-attend``: the app that must have written it.
        files (tuple of str, optional): the weights and config files of a folder, when not
            ``model.safetensors`` and ``config.json`` (see :func:`export_folder`).

    Returns:
        ModelFiles: the model's ``state_dict``, ``hyper_parameters`` and ``omitted`` record.

    Raises:
        CheckpointError: missing, unreadable, unsafe, or written by the other app or by nothing we know.
    """
    path = Path(path)
    if path.is_dir():
        weights, config_file = path / files[0], path / files[1]
        if not weights.is_file() or not config_file.is_file():
            raise CheckpointError(f"{path}: an exported model folder needs {files[0]} and {files[1]}")
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CheckpointError(f"{config_file}: not valid JSON ({err})") from None
        if not isinstance(config, dict):
            raise CheckpointError(f"{config_file}: expected a JSON object")
        check_app_tag(config, app, path)
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state_dict = load_file(str(weights))
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"{weights}: not a readable safetensors file ({err})") from None
        return ModelFiles(state_dict, dict(config.get("hyper_parameters") or {}), config.get(OMITTED_KEY))
    checkpoint = safe_torch_load(path)
    check_app_tag(checkpoint, app, path)
    if "state_dict" not in checkpoint:
        raise CheckpointError(f"{path}: not a Lightning checkpoint (no 'state_dict')")
    prefix = "model."
    state_dict = {key[len(prefix) :]: value for key, value in checkpoint["state_dict"].items() if key.startswith(prefix)}
    return ModelFiles(state_dict, dict(checkpoint.get("hyper_parameters") or {}), checkpoint.get(OMITTED_KEY))
