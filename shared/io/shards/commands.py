"""The options of both apps' ``prepare shards``, and what it says when done."""

from __future__ import annotations

import argparse

from .writer import DEFAULT_CHUNK_MB

__all__ = ["add_shard_arguments", "shard_splits", "say_shards"]


def add_shard_arguments(parser: argparse.ArgumentParser, data_help: str, splits: str) -> None:
    """``--data``, ``--out``, ``--split``, ``--chunk-mb``, ``--workers``, ``--seed``, ``--overwrite``, ``--quiet``."""
    parser.add_argument("--data", required=True, help=data_help)
    parser.add_argument("--out", required=True, help="a folder, or an object-store URL (s3://bucket/path, gs://...)")
    parser.add_argument(
        "--split",
        action="append",
        default=None,
        help=f"a split to write (repeat, or separate with commas; default: those of {splits} the data has)",
    )
    parser.add_argument("--chunk-mb", type=float, default=DEFAULT_CHUNK_MB, help=f"chunk size in MB (default {DEFAULT_CHUNK_MB})")
    parser.add_argument("--workers", type=int, default=1, help="writing processes (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the training split's order (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace shards written from other inputs")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def shard_splits(given: list[str] | None) -> list[str] | None:
    """``--split a --split b,c`` -> ``["a", "b", "c"]``; ``None`` when not given."""
    if not given:
        return None
    splits = [name.strip() for value in given for name in value.split(",") if name.strip()]
    if not splits:
        raise ValueError("--split: expected split names, e.g. --split train --split dev")
    return list(dict.fromkeys(splits))


def say_shards(out: str, written: bool, counts: dict[str, int], unit: str) -> None:
    """One line: what ``out`` now holds, or that it already held it."""
    held = ", ".join(f"{name} {count}" for name, count in counts.items())
    if written:
        print(f"shards of {held} {unit} in {out}; train with --data.shards {out}")
    else:
        print(f"{out} already holds these shards ({held} {unit}; same inputs and settings): nothing written")
