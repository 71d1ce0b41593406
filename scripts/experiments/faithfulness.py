"""Attention weights against occlusion on the shapes test split, where every object's box is known.

    python -m scripts.experiments.faithfulness [--quick] [--data data/shapes] [--out outputs/faithfulness]
    python -m scripts.experiments.faithfulness --ckpt NAME=CKPT [--ckpt NAME=CKPT ...]   (score given models only)

Trains four captioners with the demo's budget (``configs/show_attend/demo.yaml``): soft and hard
attention, each with and without the doubly stochastic term (lambda 1 and 0), then, for every
word of each model's own caption of each test image (teacher-forced on it, as
``show-attend explain``):

* pointing accuracy of the attention peak and of the occlusion peak (the cell whose removal
  lowers the word's log-probability most): for words naming an object's size, colour or shape,
  whether the peak cell's centre lies in that object's box;
* the share of words whose attention peak and occlusion peak are different cells;
* the mean rank correlation of the two maps, how often the attention peak is among the three
  most decisive cells, and the mean drop at the attention peak against a random cell.

These are the measured numbers behind "attention weights are not explanations" in a setting
where the truth is known. Writes ``OUT/faithfulness.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from shared.training.checkpoints import find_checkpoint
from show_attend.data.images import image_transform, load_image
from show_attend.data.readers import read_karpathy
from show_attend.infer.explain import explain_image
from show_attend.train.pointing import pointing_hits

ROOT = Path(__file__).resolve().parents[2]

VARIANTS = {  # name -> overrides of the demo config
    "soft, lambda 1": ["--model.decoder.attention", "soft", "--model.doubly_stochastic", "1.0"],
    "soft, lambda 0": ["--model.decoder.attention", "soft", "--model.doubly_stochastic", "0.0"],
    "hard, lambda 1": ["--model.decoder.attention", "hard", "--model.doubly_stochastic", "1.0"],
    "hard, lambda 0": ["--model.decoder.attention", "hard", "--model.doubly_stochastic", "0.0"],
}


def _train(data: Path, root: Path, steps: int, overrides: list[str]) -> Path:
    checkpoint = find_checkpoint(root, "last")
    if checkpoint is not None and (checkpoint.parents[1] / "train_seconds.txt").is_file():
        return checkpoint
    start = time.perf_counter()
    args = [
        "show_attend.cli",
        "fit",
        "--config",
        "configs/show_attend/demo.yaml",
        "--data.data_dir",
        str(data),
        "--trainer.default_root_dir",
        str(root),
        "--trainer.max_steps",
        str(steps),
        "--trainer.check_val_every_n_epoch",
        "10000",
        "--trainer.enable_progress_bar",
        "false",
        *overrides,
    ]
    print("   $ " + " ".join(args), flush=True)
    if subprocess.run([sys.executable, "-m", *args], cwd=ROOT).returncode != 0:
        raise SystemExit("faithfulness: training failed")
    checkpoint = find_checkpoint(root, "last")
    (checkpoint.parents[1] / "train_seconds.txt").write_text(f"{time.perf_counter() - start:.1f}\n")
    return checkpoint


def score(model, records: list) -> dict:
    """The measures of the module docstring over ``records`` (shapes test images with their objects)."""
    transform = image_transform(model.config.image_size)
    attention_hits = occlusion_hits = counted = 0
    words = differ = in_top = 0
    correlations, at_peak, at_random = [], [], []
    for record in records:
        image = load_image(record.path)
        explanation = explain_image(model, transform(image), record.path)
        if not explanation.words:
            continue
        tokens = [w.word for w in explanation.words]
        attention = torch.stack([w.attention for w in explanation.words])  # (T, gh, gw)
        drops = torch.stack([w.drops for w in explanation.words])
        hits, total = pointing_hits(tokens, attention, record.objects, image.size)
        attention_hits, counted = attention_hits + hits, counted + total
        occlusion_hits += pointing_hits(tokens, drops, record.objects, image.size)[0]
        for w in explanation.words:
            c = w.comparison
            words += 1
            differ += c.attention_peak != c.occlusion_peak
            in_top += c.peak_in_top
            at_peak.append(c.drop_at_attention_peak)
            at_random.append(c.drop_at_random)
            if not math.isnan(c.rank_correlation):
                correlations.append(c.rank_correlation)
    return {
        "images": len(records),
        "attribute_words": counted,
        "pointing_attention": attention_hits / max(1, counted),
        "pointing_occlusion": occlusion_hits / max(1, counted),
        "words": words,
        "peaks_differ": differ / max(1, words),
        "attention_peak_in_top3": in_top / max(1, words),
        "rank_correlation": float(np.mean(correlations)) if correlations else None,
        "drop_at_attention_peak": float(np.mean(at_peak)) if at_peak else None,
        "drop_at_random_cell": float(np.mean(at_random)) if at_random else None,
    }


def _table(results: dict[str, dict]) -> str:
    lines = [
        "| model | pointing: attention | pointing: occlusion | peaks differ | attention peak in top 3 | rank corr. | drop at peak / random |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['pointing_attention']:.3f} | {r['pointing_occlusion']:.3f} | {r['peaks_differ']:.3f} | "
            f"{r['attention_peak_in_top3']:.3f} | {r['rank_correlation']:.3f} | "
            f"{r['drop_at_attention_peak']:.3f} / {r['drop_at_random_cell']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "shapes", help="the shapes data (made if missing)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "faithfulness")
    parser.add_argument("--quick", action="store_true", help="400 training steps and 50 test images instead of 1200 and 300")
    parser.add_argument("--ckpt", action="append", default=[], metavar="NAME=CKPT", help="score these models instead of training")
    parser.add_argument("--images", type=int, default=None, help="test images scored (default: 300, or 50 with --quick)")
    args = parser.parse_args(argv)
    from show_attend.infer.caption import load_captioner

    if not (args.data / "dataset_shapes.json").is_file():
        if subprocess.run(
            [sys.executable, "-m", "show_attend.cli", "prepare", "shapes", "--out", str(args.data), "--quiet"], cwd=ROOT
        ).returncode:
            raise SystemExit("faithfulness: could not make the shapes data")
    images = args.images or (50 if args.quick else 300)
    records = [r for r in read_karpathy(args.data / "dataset_shapes.json", args.data / "images") if r.split == "test"][:images]
    out = args.out / ("quick" if args.quick else "full")
    if args.ckpt:
        models = dict(item.split("=", 1) for item in args.ckpt)
    else:
        steps = 400 if args.quick else 1200
        models = {
            name: _train(args.data, out / "runs" / name.replace(", ", "_").replace(" ", ""), steps, overrides)
            for name, overrides in VARIANTS.items()
        }
    results = {name: score(load_captioner(path).eval(), records) for name, path in models.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "faithfulness.json").write_text(json.dumps(results, indent=1) + "\n")
    print(_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
