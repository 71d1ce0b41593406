"""Check that a run's training loss fell, from its CSV log; print the first and last values.

    python -m scripts.gpu.loss_fell RUN_DIR [--column train/loss] [--min-drop 0.2]

Exit code 0 when the mean of the last fifth of logged losses is at least ``min-drop``
(relative) below the mean of the first fifth, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def losses(run_dir: Path, column: str) -> list[tuple[int, float]]:
    values = []
    for path in sorted(run_dir.glob("**/metrics.csv")):
        with path.open() as f:
            for row in csv.DictReader(f):
                value = row.get(column) or row.get(f"{column}_step")
                if value:
                    values.append((int(row["step"]), float(value)))
    return sorted(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--column", default="train/loss")
    parser.add_argument("--min-drop", type=float, default=0.2)
    args = parser.parse_args(argv)
    values = losses(args.run_dir, args.column)
    if len(values) < 5:
        print(f"{args.run_dir}: only {len(values)} logged values of {args.column}; expected at least 5", file=sys.stderr)
        return 1
    fifth = max(1, len(values) // 5)
    first = sum(v for _, v in values[:fifth]) / fifth
    last = sum(v for _, v in values[-fifth:]) / fifth
    drop = (first - last) / abs(first)
    ok = drop >= args.min_drop
    print(
        f"{args.run_dir.name}: {args.column} {first:.3f} (first steps) -> {last:.3f} (last steps up to {values[-1][0]}), "
        f"drop {drop:.0%}: {'OK' if ok else 'DID NOT FALL ENOUGH'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
