"""Which device inference runs on: ``--device`` of ``caption`` and ``transcribe``, and ``device=`` of their Python APIs.

A device the machine does not have is refused here, before a model is loaded, with one sentence
naming the value and what was expected: left to PyTorch, ``model.to("cuda")`` on a machine
without CUDA fails deep inside the first tensor moved, with an ``AssertionError`` that names
neither the option nor a way out. No Lightning here.
"""

from __future__ import annotations

import torch

__all__ = ["check_device"]


def check_device(device: str | torch.device) -> torch.device:
    """``device`` as a :class:`torch.device`, once it is known to exist on this machine.

    Args:
        device (str or torch.device): ``cpu``, ``cuda``, ``cuda:N`` (or ``mps`` where PyTorch has it).

    Raises:
        ValueError: not a device name, or a device this machine does not have.
    """
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device {device}: not a device; expected cpu, cuda or cuda:N") from None
    if found.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"--device {device}: this machine has no CUDA GPU (PyTorch sees none); expected cpu")
        if found.index is not None and found.index >= count:
            names = ", ".join(f"cuda:{i}" for i in range(count))
            raise ValueError(
                f"--device {device}: this machine has {count} CUDA GPU{'s' if count > 1 else ''}; expected cpu or one of {names}"
            )
    elif found.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"--device {device}: this machine has no MPS device; expected cpu")
    elif found.type != "cpu":
        raise ValueError(f"--device {device}: not a device inference runs on; expected cpu, cuda or cuda:N")
    return found
