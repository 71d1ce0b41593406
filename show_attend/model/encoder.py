"""The image encoder: a CNN whose last feature map is the annotation vectors ``a_1..a_L``.

Xu et al. 2015 (section 3.1.1) take the 14x14x512 conv5_4 map of VGG-19, so each of the
L = 196 vectors describes one region of the image and attention can pick regions. The same
holds for any CNN: here a torchvision ResNet-50/101/152 (2048-d) or VGG-16/19 (512-d), or a
small CNN trained from scratch for the built-in shapes. The map is average-pooled to a
``grid_size x grid_size`` grid, whatever the input size.

The paper keeps the encoder fixed; ``fine_tune_blocks`` makes the last blocks trainable.
Frozen blocks run without autograd and stay in eval mode (their batch-norm statistics fixed).

Frozen blocks with pretrained weights never change, and a published weights file (torchvision's
ImageNet weights, or ``weights_path``) restores them exactly, so checkpoints and exported models
leave them out and keep their :func:`fingerprint` instead (:meth:`Encoder.pretrained_frozen_keys`):
a ResNet-101 would otherwise add 170 MB to every checkpoint. The fingerprint also names the
features in the feature cache, so cached features always belong to the weights in use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from shared.io.model_files import CheckpointError, fingerprint

__all__ = ["EncoderConfig", "Encoder", "EncoderWeightsError", "BACKBONES", "restore_omitted_weights"]

BACKBONES = ("resnet50", "resnet101", "resnet152", "vgg16", "vgg19", "small")


class EncoderWeightsError(ValueError):
    """Pretrained weights that cannot be downloaded or loaded; the message says what to do."""


@dataclass(frozen=True)
class EncoderConfig:
    backbone: str = "resnet101"  # one of BACKBONES; "small" is a CNN trained from scratch
    pretrained: bool = True  # load torchvision's ImageNet weights (torchvision backbones only)
    weights_path: str | None = None  # a local weights file, used instead of the download
    grid_size: int = 14  # features are pooled to grid_size x grid_size locations (L = grid_size**2)
    fine_tune_blocks: int = 0  # how many of the last blocks train; 0 keeps the encoder fixed (paper)
    small_channels: int = 128  # width of the small CNN's last layer
    channels_last: bool = True  # channels-last memory format (faster convolutions on GPU)


def _small_cnn(width: int) -> list[nn.Module]:
    """Three stages that halve the resolution (8x in all), each with 3x3 conv + BN + ReLU.

    Every halving is centred (a 2x2 stride-2 convolution, then 2x2 max-pools), so each output
    cell describes its own patch of the image. A 3x3 convolution of stride 2 would centre its
    output half an input pixel up and left, which after three stages shifts every feature by
    almost half a cell: attention would then peak beside small objects instead of on them.
    The input has 2 coordinate channels.
    """

    def conv(c_in: int, c_out: int, kernel: int = 3, stride: int = 1) -> nn.Sequential:
        layer = nn.Conv2d(c_in, c_out, kernel, stride, padding=kernel // 2 if kernel % 2 else 0, bias=False)
        return nn.Sequential(layer, nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))

    quarter, half = width // 4, width // 2
    return [
        nn.Sequential(conv(5, quarter, kernel=2, stride=2), conv(quarter, quarter)),  # /2
        nn.Sequential(conv(quarter, half), conv(half, half), nn.MaxPool2d(2)),  # /4
        nn.Sequential(conv(half, width), conv(width, width), nn.MaxPool2d(2)),  # /8
    ]


def _coordinates(like: torch.Tensor) -> torch.Tensor:
    """Two channels holding each pixel's x and y in [-1, 1], `(B, 2, H, W)`."""
    batch, _, height, width = like.shape
    ys = torch.linspace(-1, 1, height, device=like.device, dtype=like.dtype)
    xs = torch.linspace(-1, 1, width, device=like.device, dtype=like.dtype)
    grid = torch.stack(torch.meshgrid(xs, ys, indexing="xy"))  # (2, H, W)
    return grid.expand(batch, -1, -1, -1)


def _read_state_dict(path: str) -> dict[str, torch.Tensor]:
    file = Path(path)
    if not file.is_file():
        raise EncoderWeightsError(f"{file}: encoder weights file not found")
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(file))
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # any failure to read is the same user error: a bad file
        raise EncoderWeightsError(f"{file}: not a readable weights file ({str(err).splitlines()[0][:160]})") from None
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    if not isinstance(state, dict):
        raise EncoderWeightsError(f"{file}: expected a state dict of tensors")
    return state


def _imagenet_state_dict(config: EncoderConfig) -> dict[str, torch.Tensor]:
    """torchvision's ImageNet weights for the backbone, from ``weights_path``, the cache or the internet."""
    if config.weights_path:
        return _read_state_dict(config.weights_path)
    from torchvision.models import get_model_weights

    weights = get_model_weights(config.backbone).DEFAULT
    try:
        return weights.get_state_dict(progress=True)
    except Exception as err:  # URLError, HTTP errors, hash mismatch: the download failed
        hub = Path(torch.hub.get_dir()) / "checkpoints"
        raise EncoderWeightsError(
            f"could not get torchvision's ImageNet weights for {config.backbone} from {weights.url} "
            f"({str(err).splitlines()[0][:120]}); without internet, download that file elsewhere and "
            f"set model.encoder.weights_path to it (or copy it into {hub}), or set "
            f"model.encoder.pretrained: false to start from random weights"
        ) from None


def _put_weights(module: nn.Module, state: Mapping[str, torch.Tensor], config: EncoderConfig) -> None:
    """Put the file's tensors into ``module`` (built on the meta device) as float32.

    ``load_state_dict(assign=True)`` takes the tensors themselves, so a file saved in another
    precision is made float32 afterwards, as copying into a built model would. A file of another
    network is one line that names it.
    """
    source = config.weights_path or f"torchvision's {config.backbone} weights"
    own = module.state_dict()
    missing, foreign = sorted(own.keys() - state.keys()), sorted(state.keys() - own.keys())
    misshapen = sorted(k for k in own.keys() & state.keys() if tuple(own[k].shape) != tuple(state[k].shape))
    if missing or foreign or misshapen:
        problems = [
            f"{len(names)} tensors {what} (e.g. {names[0]})"
            for names, what in ((missing, "missing"), (foreign, "not its own"), (misshapen, "of another shape"))
            if names
        ]
        raise EncoderWeightsError(f"{source}: not {config.backbone}'s weights: {', '.join(problems)}")
    module.load_state_dict(state, assign=True)
    module.float()


def _torchvision_blocks(config: EncoderConfig) -> tuple[list[nn.Module], int]:
    """The backbone as a list of blocks (the fine-tuning unit) and its feature size."""
    import torchvision
    from torchvision.models.vgg import cfgs, make_layers

    load = config.pretrained or config.weights_path is not None
    # Weights that are about to be replaced are built on the meta device: no random initialisation
    # of tens of millions of values (see _put_weights).
    building = torch.device("meta") if load else contextlib.nullcontext()
    if config.backbone.startswith("resnet"):
        with building:
            model = getattr(torchvision.models, config.backbone)(weights=None)
        if load:
            _put_weights(model, _imagenet_state_dict(config), config)
        stem = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
        return [stem, model.layer1, model.layer2, model.layer3, model.layer4], 2048
    # VGG: only the convolutional part (the classifier holds 120M parameters we never use).
    with building:
        features = make_layers(cfgs["D" if config.backbone == "vgg16" else "E"])
    if load:
        state = _imagenet_state_dict(config)
        prefix = "features." if any(k.startswith("features.") for k in state) else ""
        _put_weights(
            features, {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix) and "classifier" not in k}, config
        )
    layers = list(features)[:-1]  # conv5_4 (conv5_3 for VGG-16) before the last max-pool, as in the paper
    cuts = [i + 1 for i, layer in enumerate(layers) if isinstance(layer, nn.MaxPool2d)] + [len(layers)]
    blocks = [nn.Sequential(*layers[a:b]) for a, b in zip([0, *cuts[:-1]], cuts)]
    return blocks, 512


class Encoder(nn.Module):
    """CNN features on a grid: images -> annotation vectors.

    Args:
        config (EncoderConfig): backbone, weights, grid size and fine-tuning.
    """

    def __init__(self, config: EncoderConfig):
        super().__init__()
        if config.backbone not in BACKBONES:
            raise ValueError(f"unknown encoder backbone {config.backbone!r}; expected one of {', '.join(BACKBONES)}")
        if config.grid_size < 1 or config.fine_tune_blocks < 0:
            raise ValueError(
                f"grid_size must be >= 1 and fine_tune_blocks >= 0, got {config.grid_size} and {config.fine_tune_blocks}"
            )
        self.config = config
        if config.backbone == "small":
            if config.small_channels < 8 or config.small_channels % 4:
                raise ValueError(f"small_channels must be a multiple of 4 and >= 8, got {config.small_channels}")
            blocks, self.feature_dim = _small_cnn(config.small_channels), config.small_channels + 2
            self.first_trainable = 0  # trained from scratch: everything trains
        else:
            blocks, self.feature_dim = _torchvision_blocks(config)
            self.first_trainable = max(0, len(blocks) - config.fine_tune_blocks)
        self.blocks = nn.ModuleList(blocks)
        for block in self.blocks[: self.first_trainable]:
            block.requires_grad_(False)
        if config.channels_last:
            self.blocks.to(memory_format=torch.channels_last)
        self.train()  # puts the frozen blocks in eval mode from the start

    @property
    def frozen(self) -> bool:
        """True when no encoder weight trains (its features can be cached)."""
        return self.first_trainable >= len(self.blocks)

    @property
    def grid(self) -> tuple[int, int]:
        return (self.config.grid_size, self.config.grid_size)

    @property
    def has_pretrained_weights(self) -> bool:
        """Whether the weights came from a published file (torchvision's or ``weights_path``)."""
        return self.config.backbone != "small" and (self.config.pretrained or self.config.weights_path is not None)

    def pretrained_frozen_keys(self, prefix: str = "") -> list[str]:
        """State-dict keys (with ``prefix``) of the frozen blocks whose weights a published file
        restores: what checkpoints and exports leave out. Empty without pretrained weights."""
        if not self.has_pretrained_weights:
            return []
        return [f"{prefix}blocks.{key}" for key in self.blocks[: self.first_trainable].state_dict()]

    def pretrained_frozen_fingerprint(self) -> str:
        """:func:`fingerprint` of the tensors under :meth:`pretrained_frozen_keys`."""
        state = self.state_dict()
        return fingerprint({key: state[key] for key in self.pretrained_frozen_keys()})

    def train(self, mode: bool = True) -> Encoder:
        super().train(mode)
        for block in self.blocks[: self.first_trainable]:
            block.eval()  # a fixed encoder keeps its batch-norm statistics
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Args:
            images (torch.Tensor): normalised images `(B, 3, H, W)`, any H and W.

        Returns:
            torch.Tensor: annotation vectors `(B, L, D)`, L = grid_size ** 2, D = ``feature_dim``.
        """
        x = images
        if self.config.backbone == "small":
            x = torch.cat([x, _coordinates(x)], dim=1)  # (B, 5, H, W): CoordConv, so position is learnable
        if self.config.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        for i, block in enumerate(self.blocks):
            with torch.set_grad_enabled(torch.is_grad_enabled() and i >= self.first_trainable):
                x = block(x)
        x = F.adaptive_avg_pool2d(x, self.grid)  # (B, C, g, g)
        if self.config.backbone == "small":
            x = torch.cat([x, _coordinates(x)], dim=1)  # (B, C + 2, g, g): each location says where it is
        return x.flatten(2).transpose(1, 2).contiguous()  # (B, L, D)


def restore_omitted_weights(state_dict: dict, omitted: dict, encoder: Encoder, where: str, prefix: str = "") -> None:
    """Put the frozen pretrained weights a checkpoint or export left out (``omitted["keys"]``,
    the model's state-dict keys) back into ``state_dict`` under ``prefix`` + key, from
    ``encoder`` (built from the published weights file), after checking that they are the very
    weights the model was trained with.

    Raises:
        CheckpointError: ``encoder`` has no pretrained weights, or other ones.
    """
    if not encoder.has_pretrained_weights:
        raise CheckpointError(
            f"{where}: this model leaves out the frozen ImageNet weights of its {encoder.config.backbone} encoder; "
            f"they are restored from torchvision's weights file: set model.encoder.pretrained: true, or "
            f"model.encoder.weights_path to the file"
        )
    found = encoder.pretrained_frozen_fingerprint()
    if found != omitted.get("fingerprint"):
        raise CheckpointError(
            f"{where}: the {encoder.config.backbone} weights file in use (fingerprint {found}) is not the one this model "
            f"was trained with (fingerprint {omitted.get('fingerprint')}); give model.encoder.weights_path that file"
        )
    state = encoder.state_dict()
    for key in omitted["keys"]:
        state_dict[prefix + key] = state[key.removeprefix("encoder.")]
