"""The ``show-attend`` command line.

    show-attend fit|validate|test --config configs/show_attend/shapes_soft.yaml [--data.data_dir DIR] ...
    show-attend prepare shapes --out data/shapes [--train N --val N --test N --seed S --image-size PX --max-objects K]
    show-attend prepare shards --data DIR --out PATH_OR_URL [--split train ...] [--workers N]   (LitData chunks, docs/SHARDS.md)
    show-attend caption --ckpt CKPT_OR_EXPORTED_DIR IMAGE_OR_FOLDER... [--beam-size 5] [--device cuda] [--overlay-dir DIR] [--html DIR] [--json]
    show-attend evaluate --model CKPT_OR_EXPORTED_DIR --data DIR [--split test] [--beam-size N] [--json OUT]
    show-attend export --ckpt CKPT --out DIR [--include-encoder] [--beam-size 5]
    show-attend explain --ckpt CKPT IMAGE... --out DIR [--pixels]

``fit``, ``validate`` and ``test`` go through :class:`shared.training.cli.AttendCLI` with the
YAML configs of ``configs/show_attend/`` (run layout, checkpoints, resume: see there); here the
data module's vocabulary and image size are linked into the model, and the model's encoder is
handed to the data module for the feature cache. User errors print one line and exit with 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from shared.io.commands import expand_folders, run_app
from shared.io.devices import check_device
from shared.io.outputs import output_names, writable_folder
from shared.io.shards.commands import add_shard_arguments, say_shards, shard_splits

__all__ = ["main"]  # CaptionCLI and EncoderToFeatureCache: show_attend.train.cli

PROG = "show-attend"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")  # what a folder argument yields


def _lightning(args: list[str]) -> None:
    from show_attend.train.cli import fit_validate_test  # Lightning loads only for the commands that train

    fit_validate_test(args)


def __getattr__(name: str):
    if name in ("CaptionCLI", "EncoderToFeatureCache"):
        from show_attend.train import cli

        return getattr(cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _prepare(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} prepare", description="Generate built-in data, or shards of a data set.")
    kinds = parser.add_subparsers(dest="kind", required=True)
    shapes = kinds.add_parser("shapes", help="scenes of coloured shapes with exact captions (Karpathy JSON + PNGs)")
    shapes.add_argument("--out", required=True, help="output folder")
    shapes.add_argument("--train", type=int, default=6000, help="training images (default 6000)")
    shapes.add_argument("--val", type=int, default=300, help="validation images (default 300)")
    shapes.add_argument("--test", type=int, default=300, help="test images (default 300)")
    shapes.add_argument("--seed", type=int, default=0)
    shapes.add_argument("--image-size", type=int, default=128, help="image side in pixels (default 128)")
    shapes.add_argument("--max-objects", type=int, default=4, help="most objects per image (default 4)")
    shapes.add_argument("--quiet", action="store_true", help="no progress bar")
    shards = kinds.add_parser("shards", help="a caption data set as LitData chunks, streamed by data.shards (docs/SHARDS.md)")
    add_shard_arguments(
        shards,
        "a caption data set: a Karpathy split file (COCO, Flickr, shapes), a manifest or an imagefolder",
        "train, val, test",
    )
    shards.add_argument("--json-file", default=None, help="a Karpathy split file in --data, as data.json_file")
    shards.add_argument("--image-dir", default=None, help="its image folder, as data.image_dir")
    options = parser.parse_args(args)
    if options.kind == "shards":
        from show_attend.data.shards import write_caption_shards

        written, counts = write_caption_shards(
            options.data,
            options.out,
            shard_splits(options.split),
            options.json_file,
            options.image_dir,
            options.seed,
            options.chunk_mb,
            options.workers,
            progress=not options.quiet,
            overwrite=options.overwrite,
        )
        say_shards(options.out, written, counts, "images")
        return 0
    from show_attend.builtin.shapes import prepare_shapes

    path = prepare_shapes(
        options.out,
        options.train,
        options.val,
        options.test,
        options.seed,
        options.image_size,
        options.max_objects,
        progress=not options.quiet,
    )
    print(f"wrote {path}")
    return 0


def _caption(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} caption", description="Caption images with a trained model.")
    parser.add_argument("images", nargs="+", help="image files (any format and size Pillow reads), or folders of them")
    parser.add_argument(
        "--ckpt",
        default=None,
        help="a .ckpt file or a folder written by `export` (default: a shipped captioner, models/show_attend; none ships yet)",
    )
    parser.add_argument("--beam-size", type=int, default=None, help="beams (default: the model's, 5 unless trained otherwise)")
    parser.add_argument("--max-length", type=int, default=None, help="most words per caption (default: the model's)")
    parser.add_argument("--overlay-dir", default=None, help="write one PNG per image: each word with its attention map")
    parser.add_argument(
        "--html",
        default=None,
        metavar="DIR",
        help="write DIR/index.html: every image with its caption, each word's attention on hover or click, the beam's other captions",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line: image, caption (also as text), tokens, score, beams (text, tokens, score), overlay",
    )
    parser.add_argument(
        "--encoder-weights",
        default=None,
        help="the encoder's pretrained weights file, for a model that leaves them out (default: where training found it)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    options = parser.parse_args(args)
    from show_attend.infer.caption import Captioning, save_overlay, shipped_model

    check_device(options.device)  # every setting before the model loads and anything is decoded
    Captioning.check_settings(options.beam_size, options.max_length)
    for option, folder in (("--overlay-dir", options.overlay_dir), ("--html", options.html)):
        if folder is not None:
            writable_folder(folder, option)
    ckpt = options.ckpt or shipped_model()  # none ships today: a one-line error that says so
    images, errors = expand_folders(options.images, IMAGE_SUFFIXES, "image")
    for error in errors:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    if not images:
        return 2
    captioning = Captioning.load(
        ckpt, options.device, beam_size=options.beam_size, max_length=options.max_length, encoder_weights=options.encoder_weights
    )
    names = output_names(images)  # a/x.png and b/x.png do not overwrite each other
    status = 2 if errors else 0
    captioned = []  # for the page
    nbest = captioning.beam_size if options.html or options.json else 1  # the page and --json show every beam
    # a bar for a person at a terminal; never inside --json output or a log file
    with tqdm(
        total=len(images),
        desc="caption",
        unit="image",
        file=sys.stderr,
        disable=options.json or not sys.stderr.isatty() or len(images) < 2,
    ) as bar:
        say = bar.write if not bar.disable else print  # bar.write keeps the bar below the lines
        for name, result in zip(names, captioning.caption_many(images, nbest)):
            bar.update()
            if isinstance(result, Exception):  # one bad file does not stop the others
                say(f"{PROG}: error: {str(result).splitlines()[0]}", file=sys.stderr)
                status = 2
                continue
            overlay = None
            if options.overlay_dir:
                overlay = str(save_overlay(result, Path(options.overlay_dir) / f"{name}.png"))
            if options.html:
                captioned.append(result)
            if options.json:
                say(json.dumps(result.to_json(overlay), ensure_ascii=False), file=sys.stdout)
            else:
                say(f"{result.image}: {result.caption}" + (f"  [{overlay}]" if overlay else ""), file=sys.stdout)
            sys.stdout.flush()
    if options.html:
        from show_attend.infer.gallery import write_gallery

        print(f"wrote {write_gallery(captioned, options.html, f'Captions by {ckpt}')}", file=sys.stderr)
    return status


def _evaluate(args: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} evaluate",
        description="Score a model on a split of a data set: BLEU-1..4, METEOR (where Java and its jar are found), "
        "ROUGE-L, CIDEr-D and exact match of its beam search's captions, as `test` computes them, without Lightning.",
    )
    parser.add_argument("--model", required=True, help="a .ckpt file or a folder written by `export`")
    parser.add_argument("--data", required=True, metavar="DIR", help="the data set's folder (any layout `fit` reads)")
    parser.add_argument("--split", default="test", help="train, val or test (default test)")
    parser.add_argument("--beam-size", type=int, default=None, help="beams (default: the model's)")
    parser.add_argument("--max-length", type=int, default=None, help="most words per caption (default: the model's)")
    parser.add_argument("--no-meteor", action="store_true", help="leave METEOR out (it starts a Java process)")
    parser.add_argument(
        "--encoder-weights", default=None, help="the encoder's pretrained weights file, for a model that leaves them out"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    parser.add_argument(
        "--json",
        default=None,
        metavar="OUT",
        help="also write the scores as JSON to file OUT (-: to standard output, instead of the lines)",
    )
    options = parser.parse_args(args)
    from show_attend.evaluate.evaluate import evaluate, report
    from show_attend.infer.caption import Captioning

    captioning = Captioning.load(
        options.model,
        options.device,
        encoder_weights=options.encoder_weights,
        beam_size=options.beam_size,
        max_length=options.max_length,
    )
    results = {"model": str(options.model), **evaluate(captioning, options.data, options.split, meteor=not options.no_meteor)}
    text = json.dumps(results, indent=1)
    if options.json == "-":
        print(text)
    else:
        print("\n".join(report(results)))
        if options.json:
            Path(options.json).write_text(text + "\n")
    return 0


def _explain(args: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} explain", description="Compare each word's attention with occlusion: what the word depended on."
    )
    parser.add_argument("images", nargs="+", help="image files, or folders of them")
    parser.add_argument("--ckpt", required=True, help="a .ckpt file or a folder written by `export`")
    parser.add_argument("--out", required=True, help="folder for one PNG per image and explain.jsonl (one line per word)")
    parser.add_argument(
        "--pixels",
        action="store_true",
        help="occlude image patches and encode again (default: replace grid cells' features by the mean feature)",
    )
    parser.add_argument("--beam-size", type=int, default=None, help="beams for the caption (default: the model's)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (default cpu)")
    options = parser.parse_args(args)
    if options.beam_size is not None and options.beam_size < 1:
        raise ValueError(f"--beam-size must be >= 1, got {options.beam_size}")
    check_device(options.device)
    from shared.evaluation.faithfulness import write_explanations
    from show_attend.infer.caption import load_captioner
    from show_attend.infer.explain import explain_files, save_explanation

    out = writable_folder(options.out, "--out")  # before the model loads
    model = load_captioner(options.ckpt, options.device)
    images, errors = expand_folders(options.images, IMAGE_SUFFIXES, "image")
    for error in errors:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    explained = explain_files(model, images, options.beam_size, options.pixels)
    status = write_explanations(explained, out, save_explanation, PROG, "cells", "words", output_names(images))
    return 2 if errors else status


def _export(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} export", description="Export a checkpoint as safetensors + JSON.")
    parser.add_argument("--ckpt", required=True, help="a Lightning .ckpt file")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--include-encoder",
        action="store_true",
        help="also store a frozen pretrained encoder's weights (left out by default: the published file restores them)",
    )
    parser.add_argument(
        "--beam-size", type=int, default=None, help="beams, saved as caption's default (default: the checkpoint's)"
    )
    options = parser.parse_args(args)
    from show_attend.infer.caption import export_model

    print(f"exported to {export_model(options.ckpt, options.out, options.include_encoder, options.beam_size)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``show-attend``; returns the exit code."""
    commands = {"prepare": _prepare, "caption": _caption, "evaluate": _evaluate, "explain": _explain, "export": _export}
    return run_app(PROG, commands, _lightning, argv)


if __name__ == "__main__":
    sys.exit(main())
