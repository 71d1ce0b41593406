"""Loading models without running anyone's code: safe checkpoints and exported folders.

Two formats carry a trained model:

* a Lightning checkpoint (``.ckpt``), loaded with ``torch.load(weights_only=True)``: only
  tensors and plain Python containers are accepted, so a crafted pickle is refused before
  anything in it runs. The apps keep their hyper-parameters and vocabularies as plain
  dicts/lists so their checkpoints pass this check;
* an exported folder: ``model.safetensors`` (weights) plus ``config.json`` (model config,
  vocabulary, feature settings). Nothing in it is executable.

:func:`load_model_files` takes either and returns ``(state_dict, config)``.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

__all__ = ["CheckpointError", "safe_torch_load", "export_folder", "load_model_files", "CONFIG_FILE", "WEIGHTS_FILE"]

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


class CheckpointError(ValueError):
    """A checkpoint or exported folder that cannot be (safely) loaded."""


# What torch.save writes: a zip archive, or (legacy format) a pickle starting with its PROTO opcode.
_CHECKPOINT_STARTS = (b"PK\x03\x04", b"\x80")
# Files people pass as --ckpt by mistake, named in the error instead of an unpickler's complaint.
_KNOWN_STARTS = {b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"RIFF": "a RIFF (WAV) file",
                 b"fLaC": "a FLAC file", b"OggS": "an Ogg file", b"ID3": "an MP3 file", b"{": "JSON text"}


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


def export_folder(out_dir: str | Path, state_dict: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``out_dir`` (created if needed)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # safetensors refuses tensors that share memory; contiguous clones are always accepted.
    save_file({k: v.detach().cpu().contiguous().clone() for k, v in state_dict.items()}, str(out / WEIGHTS_FILE))
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    return out


def load_model_files(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Weights and config from a Lightning checkpoint or an exported folder.

    For a checkpoint the config is its ``hyper_parameters`` (saved by ``save_hyperparameters``)
    and the state dict is the LightningModule's.

    Returns:
        (dict, dict): ``state_dict`` and ``config``.
    """
    path = Path(path)
    if path.is_dir():
        weights, config_file = path / WEIGHTS_FILE, path / CONFIG_FILE
        if not weights.is_file() or not config_file.is_file():
            raise CheckpointError(f"{path}: an exported model folder needs {WEIGHTS_FILE} and {CONFIG_FILE}")
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state_dict = load_file(str(weights))
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"{weights}: not a readable safetensors file ({err})") from None
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CheckpointError(f"{config_file}: not valid JSON ({err})") from None
        return state_dict, config
    checkpoint = safe_torch_load(path)
    if "state_dict" not in checkpoint:
        raise CheckpointError(f"{path}: not a Lightning checkpoint (no 'state_dict')")
    return checkpoint["state_dict"], dict(checkpoint.get("hyper_parameters") or {})
