"""Average exported models fine-tuned from one start into one exported model (a uniform model soup).

    python -m scripts.experiments.average_models --models outputs/ft26s2/HFA_export outputs/ft26s3/HFA_export --out outputs/ft26soup

Each weight of the result is the mean of the models' (``shared.training.averaging.uniform_soup``).
The models must be the same model apart from their weights: the same ``config.json``, and every
other file of the folders (a recognizer's language model) the same bytes; those files are copied.
It prints how far apart the models are (``||theta_a - theta_b|| / ||theta_a||`` for each pair):
fine-tunes of one start sit a few percent apart; a much larger distance means models trained
apart, whose mean is no model.
"""

from __future__ import annotations

import argparse
import filecmp
import itertools
import json
import shutil
import sys
from pathlib import Path

import torch

from shared.io.model_files import CONFIG_FILE, WEIGHTS_FILE, CheckpointError, export_folder, load_model_files
from shared.io.writes import replacing
from shared.training.averaging import uniform_soup


def _app(folder: Path) -> str:
    """The app that wrote an exported folder (its config's tag), or a one-line error."""
    config = folder / CONFIG_FILE
    if not config.is_file():
        raise CheckpointError(f"{folder}: not an exported model folder (no {CONFIG_FILE})")
    try:
        return str(json.loads(config.read_text(encoding="utf-8")).get("app"))
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as err:
        raise CheckpointError(f"{config}: not a model config ({err})") from None


def _side_files(folder: Path) -> list[str]:
    """The files of an exported folder besides its weights and config (a recognizer's language model)."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in (WEIGHTS_FILE, CONFIG_FILE))


def relative_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """``||a - b|| / ||a||`` over the floating-point tensors of two models."""
    names = [n for n, t in a.items() if t.is_floating_point()]
    difference = sum(float((a[n].double() - b[n].double()).square().sum()) for n in names)
    norm = sum(float(a[n].double().square().sum()) for n in names)
    return (difference / max(norm, 1e-30)) ** 0.5


def average_exports(folders: list[Path], out: Path) -> list[float]:
    """Write the soup of ``folders`` into ``out``; return the models' pairwise relative distances.

    Raises:
        CheckpointError: a folder that is not an export of the same app as the first.
        ValueError: configs or side files that differ, or weights that cannot be averaged.
    """
    app = _app(folders[0])
    models = [load_model_files(folder, app) for folder in folders]  # names a missing, corrupt or foreign folder
    for folder, model in zip(folders[1:], models[1:]):
        if model.hyper_parameters != models[0].hyper_parameters:
            changed = sorted(
                k
                for k in model.hyper_parameters.keys() | models[0].hyper_parameters.keys()
                if model.hyper_parameters.get(k) != models[0].hyper_parameters.get(k)
            )
            raise ValueError(f"{folder}: its settings differ from {folders[0]}'s ({', '.join(changed)}); a soup needs one model")
    side_files = _side_files(folders[0])
    for folder in folders[1:]:
        extra = sorted(set(_side_files(folder)) - set(side_files))
        if extra:
            raise ValueError(f"{folder / extra[0]}: not in {folders[0]}; the folders must hold the same files")
        for name in side_files:
            if not (folder / name).is_file() or not filecmp.cmp(folders[0] / name, folder / name, shallow=False):
                raise ValueError(f"{folder / name}: missing or not the same file as {folders[0] / name}")
    soup = uniform_soup([m.state_dict for m in models])
    export_folder(out, app, soup, models[0].hyper_parameters, models[0].omitted)
    for name in side_files:
        if (out / name).resolve() != (folders[0] / name).resolve():
            with replacing(out / name, f"the copied {name}") as temporary:
                shutil.copyfile(folders[0] / name, temporary)
    return [relative_distance(a.state_dict, b.state_dict) for a, b in itertools.combinations(models, 2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, nargs="+", required=True, help="two or more exported model folders")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write the averaged model into")
    args = parser.parse_args(argv)
    if len(args.models) < 2:
        parser.error(f"--models: a soup needs at least two folders, got {len(args.models)}")
    try:
        distances = average_exports(args.models, args.out)
    except (CheckpointError, ValueError) as error:
        print(f"average_models: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the writer's one line: what, where and why
        print(f"average_models: error: {error}", file=sys.stderr)
        return 1
    print(
        f"{args.out}: the mean of {len(args.models)} models; relative distances between them: "
        + ", ".join(f"{d:.4f}" for d in distances)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
