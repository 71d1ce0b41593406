"""Widen a trained recognizer's listener and speller, keeping what it computes (Net2WiderNet).

Chen, Goodfellow and Shlens (2016, "Net2Net") widen a layer by copying some of its units: each
new unit takes the incoming weights of an old one, and every weight that reads a copied unit is
divided among the copies, so the wider network computes the same function and training goes on
from where the narrow one stood. Here the units are LSTM units (the four gate rows of each) and
the spaces they span are:

* ``g``: the listener's units per direction, ``H -> H'``; a listener state is ``[forward; backward]``
  (``2H``), and a pyramid layer reads two of them side by side (``4H``);
* ``s``: the speller's units, ``S -> S'``, read by its own recurrence, the attention's query and
  the output MLP.

The CTC head, the attention's keys and the speller's context read the listener states. Without
layer norm the wider model's outputs equal the narrow one's; with it they are equal when every
listener unit has the same number of copies (``H' = 2H``) and close otherwise (the norm's mean
and variance then weigh the copied units twice). Dropout gives the copies different gradients,
which breaks their symmetry; ``noise`` adds a little more.

The written checkpoint resumes like any other (``fit --ckpt_path``): the step, the schedule and
the timer carry on, and the optimizer's moments start afresh (they belonged to other shapes).
An exported folder (``models/speech_attend``) grows into an exported folder, which ``fit
--init_from`` starts a new run from.

    python -m scripts.experiments.grow_recognizer --ckpt outputs/ft3/FQ_last_65718.ckpt --out grown.ckpt \\
        --listener-hidden 192 --speller-hidden 384
    python -m scripts.experiments.grow_recognizer --ckpt models/speech_attend --out grown/ --listener-hidden 256 --speller-hidden 512
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from shared.io.model_files import CheckpointError, export_folder, load_model_files, safe_torch_load

GROWABLE_ATTENTION = ("location", "additive")  # scores whose query and key projections are plain Linear layers


def copy_map(old: int, new: int, generator: torch.Generator) -> torch.Tensor:
    """The old unit each new unit copies `(new,)`: the first ``old`` are themselves, the others a
    random choice without repeats (so ``new = 2 * old`` copies every unit once).

    Raises:
        ValueError: ``new`` is below ``old`` or above ``2 * old``.
    """
    if not old <= new <= 2 * old:
        raise ValueError(f"a layer of {old} units can grow to {old}..{2 * old} units, got {new}")
    return torch.cat([torch.arange(old), torch.randperm(old, generator=generator)[: new - old]])


def gate_rows(units: torch.Tensor, old: int) -> torch.Tensor:
    """Row map of an LSTM's four gate blocks (input, forget, cell, output) for the unit map ``units``."""
    return torch.cat([gate * old + units for gate in range(4)])


def repeats(index: torch.Tensor) -> torch.Tensor:
    """Which entries of ``index`` repeat an earlier one `(N,)`: the copies, not the originals."""
    seen: set[int] = set()
    mask = []
    for i in index.tolist():
        mask.append(i in seen)
        seen.add(i)
    return torch.tensor(mask, dtype=torch.bool)


def widen(weight: torch.Tensor, rows: torch.Tensor | None = None, columns: torch.Tensor | None = None) -> torch.Tensor:
    """``weight[rows][:, columns]``, each column divided by how many new columns copy its old one.

    Args:
        weight (torch.Tensor): `(out, in)` or `(out,)`.
        rows (torch.Tensor or None): old row of each new row; ``None`` keeps them.
        columns (torch.Tensor or None): old column of each new column; ``None`` keeps them.
    """
    if rows is not None:
        weight = weight[rows]
    if columns is not None:
        copies = torch.bincount(columns, minlength=weight.size(1)).to(weight.dtype)
        weight = weight[:, columns] / copies[columns]
    return weight


def grow_state_dict(
    state: dict[str, torch.Tensor], las: dict, listener_hidden: int, speller_hidden: int, seed: int = 0, noise: float = 0.0
) -> dict[str, torch.Tensor]:
    """A recognizer's weights (``LAS.state_dict()`` keys) widened to new listener and speller sizes.

    Args:
        state (dict): the narrow model's tensors.
        las (dict): its architecture (``LASConfig`` fields).
        listener_hidden (int): ``H'``, at least ``H`` and at most ``2H``.
        speller_hidden (int): ``S'``, at least ``S`` and at most ``2S``.
        seed (int, optional): which units are copied, and the noise. (Default: ``0``)
        noise (float, optional): Gaussian noise on the copies' incoming weights, as a fraction of
            each matrix's standard deviation (0 keeps the function). (Default: ``0.0``)

    Raises:
        ValueError: a size out of range, or an attention whose projections this does not know.
    """
    if las["attention"] not in GROWABLE_ATTENTION:
        raise ValueError(f"growing supports the attentions {GROWABLE_ATTENTION}, got {las['attention']!r}")
    generator = torch.Generator().manual_seed(seed)
    H, S = las["listener_hidden"], las["speller_hidden"]
    g, s = copy_map(H, listener_hidden, generator), copy_map(S, speller_hidden, generator)
    encoder = torch.cat([g, H + g])  # a listener state: [forward; backward]
    pyramid_input = torch.cat([encoder, 2 * H + encoder])  # two consecutive states side by side (eq. 5)
    listener_gates, speller_gates = gate_rows(g, H), gate_rows(s, S)

    maps: dict[str, tuple[torch.Tensor | None, torch.Tensor | None]] = {}  # name -> (rows, columns)
    blstms = [(f"layers.{i}", None if i == 0 else encoder) for i in range(las["listener_layers"])]  # (name, input columns)
    blstms += [(f"pyramid.{i}", pyramid_input) for i in range(las["pyramid_layers"])]
    for layer, inputs in blstms:
        for direction in ("forward_lstm", "backward_lstm"):
            prefix = f"listener.{layer}.{direction}"
            maps[f"{prefix}.weight_ih_l0"] = (listener_gates, inputs)
            maps[f"{prefix}.weight_hh_l0"] = (listener_gates, g)
            maps[f"{prefix}.bias_ih_l0"] = maps[f"{prefix}.bias_hh_l0"] = (listener_gates, None)
    for i in range(las["listener_layers"] + las["pyramid_layers"]):
        maps[f"listener.norms.{i}.weight"] = maps[f"listener.norms.{i}.bias"] = (encoder, None)
    maps["speller.embed_to_gates.weight"] = maps["speller.embed_to_gates.bias"] = (speller_gates, None)
    for i in range(las["speller_layers"]):  # columns: the layer's input (context or layer below), then its state
        below = encoder if i == 0 else s
        maps[f"speller.lstm.{i}.weight"] = (speller_gates, torch.cat([below, (2 * H if i == 0 else S) + s]))
        maps[f"speller.lstm.{i}.bias"] = (speller_gates, None)
    maps["speller.attention.score.query_proj.weight"] = (None, s)
    maps["speller.attention.score.key_proj.weight"] = (None, encoder)
    maps["speller.output.1.weight"] = (s, torch.cat([s, S + encoder]))  # reads [s_i; c_i]
    maps["speller.output.1.bias"] = (s, None)
    maps["speller.output.3.weight"] = (None, s)
    maps["ctc_head.weight"] = (None, encoder)

    grown = {}
    for name, tensor in state.items():
        rows, columns = maps.get(name, (None, None))
        wide = widen(tensor, rows, columns)
        if noise > 0 and rows is not None and wide.dim() == 2:
            copies = repeats(rows)
            wide[copies] += noise * tensor.std() * torch.randn(wide[copies].shape, generator=generator)
        grown[name] = wide
    return grown


def grow_checkpoint(checkpoint: dict, listener_hidden: int, speller_hidden: int, seed: int = 0, noise: float = 0.0) -> dict:
    """A training checkpoint of the widened model that ``fit --ckpt_path`` resumes: the same step,
    schedule, timer and data position; new sizes in its hyper-parameters; fresh optimizer moments."""
    las = dict(checkpoint["hyper_parameters"]["las"])
    model = {k[len("model.") :]: v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    grown = grow_state_dict(model, las, listener_hidden, speller_hidden, seed, noise)
    hyper_parameters = {
        **checkpoint["hyper_parameters"],
        "las": {**las, "listener_hidden": listener_hidden, "speller_hidden": speller_hidden},
    }
    optimizer_states = [{**state, "state": {}} for state in checkpoint["optimizer_states"]]  # Adam starts its moments again
    return {
        **checkpoint,
        "state_dict": {f"model.{k}": v for k, v in grown.items()},
        "hyper_parameters": hyper_parameters,
        "optimizer_states": optimizer_states,
    }


def grow_export(
    source: Path, out: Path, listener_hidden: int, speller_hidden: int, seed: int = 0, noise: float = 0.0
) -> tuple[int, int]:
    """Widen an exported model into the folder ``out`` (weights and settings; no language model):
    its weight counts before and after."""
    files = load_model_files(source, "speech-attend")  # names a missing, corrupt or foreign folder
    las = files.hyper_parameters.get("las")
    if not isinstance(las, dict):
        raise CheckpointError(f"{source}: not a speech-attend model (no las settings)")
    grown = grow_state_dict(files.state_dict, las, listener_hidden, speller_hidden, seed, noise)
    export_folder(
        out,
        "speech-attend",
        grown,
        {**files.hyper_parameters, "las": {**las, "listener_hidden": listener_hidden, "speller_hidden": speller_hidden}},
    )
    return (
        sum(v.numel() for k, v in files.state_dict.items() if "frontend" not in k),
        sum(v.numel() for k, v in grown.items() if "frontend" not in k),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", type=Path, required=True, help="a speech-attend training checkpoint, or an exported folder")
    parser.add_argument("--out", type=Path, required=True, help="where to write the widened checkpoint (a folder from a folder)")
    parser.add_argument("--listener-hidden", type=int, required=True, help="new units per listener direction (H to 2H)")
    parser.add_argument("--speller-hidden", type=int, required=True, help="new speller units (S to 2S)")
    parser.add_argument("--seed", type=int, default=0, help="which units are copied")
    parser.add_argument(
        "--noise", type=float, default=0.01, help="noise on the copies' incoming weights, times each matrix's std"
    )
    args = parser.parse_args(argv)
    if args.ckpt.is_dir():
        try:
            before, after = grow_export(args.ckpt, args.out, args.listener_hidden, args.speller_hidden, args.seed, args.noise)
        except CheckpointError as error:
            print(f"grow_recognizer: error: {error}", file=sys.stderr)
            return 2
        except ValueError as error:
            print(f"grow_recognizer: error: {args.ckpt}: {error}", file=sys.stderr)
            return 2
        except OSError as error:  # the writer's one line: what, where and why
            print(f"grow_recognizer: error: {error}", file=sys.stderr)
            return 1
        print(f"{args.out}: {before / 1e6:.2f} M -> {after / 1e6:.2f} M weights (an exported folder: fit --init_from it)")
        return 0
    try:
        checkpoint = safe_torch_load(args.ckpt)  # names the file when missing, empty, corrupt or pickled code
        if not isinstance(checkpoint.get("hyper_parameters", {}).get("las"), dict) or "state_dict" not in checkpoint:
            raise CheckpointError(f"{args.ckpt}: not a speech-attend training checkpoint (no state_dict or hyper_parameters.las)")
        grown = grow_checkpoint(checkpoint, args.listener_hidden, args.speller_hidden, args.seed, args.noise)
    except CheckpointError as error:
        print(f"grow_recognizer: error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:  # a size out of range, an attention it cannot grow
        print(f"grow_recognizer: error: {args.ckpt}: {error}", file=sys.stderr)
        return 2
    try:
        torch.save(grown, args.out)
    except (OSError, RuntimeError) as error:
        print(f"grow_recognizer: error: could not write {args.out}: {error}", file=sys.stderr)
        return 1
    before = sum(v.numel() for k, v in checkpoint["state_dict"].items() if "frontend" not in k)
    after = sum(v.numel() for k, v in grown["state_dict"].items() if "frontend" not in k)
    print(f"{args.out}: {before / 1e6:.2f} M -> {after / 1e6:.2f} M weights at step {checkpoint['global_step']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
