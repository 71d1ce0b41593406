"""Files or shards: what each training loader delivers per core, how soon, and on how many bytes.

    python -m scripts.benchmarks.shards --speech DIR [--images DIR] [--out DIR] [--workers 0] [--passes 2] [--json OUT]

For each data set given (a speech corpus, a caption data set), the shards are written into ``--out``
(``prepare shards``, unless they are there already), then both training loaders of the app's data
module, the file-per-sample one (``data.data_dir``) and the streaming one (``data.shards``), read one
epoch each, side by side and in turns, ``--passes`` times; the last pass is reported, once the files
are in the page cache for both. Measured: samples (utterances, images) delivered per second of
processor time (per core: the training process and its loader processes, whatever else the machine
runs) and per second of wall time, the seconds from asking for the loader to its first batch, and
the bytes of the training split on disk (the media files against the shard folder). One thread
each, as a loader process has. The recognizer's batches are buckets of
``--batch-size`` utterances; the captioner's images are resized to ``--image-size``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from show_attend.data.readers import read_captions
from show_attend.data.shards import write_caption_shards
from show_attend.train.datamodule import CaptionDataModule
from speech_attend.data.readers import read_corpus
from speech_attend.data.shards import write_speech_shards
from speech_attend.train.datamodule import SpeechDataModule

__all__ = ["measure_loader", "main"]


def _size(paths) -> int:
    return sum(os.path.getsize(p) for p in paths)


def _cpu_seconds() -> float:
    """Processor seconds of this process and of its ended children (the loader processes of an epoch)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def measure_loader(make: Callable[[], object], count: Callable[[object], int]) -> dict:
    """One epoch of the loader ``make()`` returns (its data module set up inside): samples per
    processor second (per core, whatever else the machine runs) and per wall second over the epoch,
    and the seconds from ``make()`` to the first batch."""
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    loader = make()
    epoch, cpu_epoch = time.perf_counter(), _cpu_seconds()
    batches = iter(loader)
    first = next(batches)
    first_seconds, first_cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    samples = count(first) + sum(count(batch) for batch in batches)
    del batches, loader  # its loader processes end, and their processor time is counted
    seconds, cpu = time.perf_counter() - epoch, _cpu_seconds() - cpu_epoch
    return {
        "samples": samples,
        "samples_per_cpu_second": round(samples / cpu, 1),
        "samples_per_second": round(samples / seconds, 1),
        "first_batch_seconds": round(first_seconds, 3),
        "first_batch_cpu_seconds": round(first_cpu, 3),
    }


def _speech(corpus: Path, shards: Path, workers: int, batch_size: int) -> dict:
    start = time.perf_counter()
    write_speech_shards(corpus, str(shards), progress=False)
    written = time.perf_counter() - start
    common = {"batch_size": batch_size, "num_workers": workers, "sample_rate": 16000}

    def loader(**where):
        module = SpeechDataModule(**where, **common)
        module.setup("fit")
        return module.train_dataloader()

    files = [u.audio_path for u in read_corpus(corpus, "train")]
    sizes = {"files": _size(files), "shards": _size((shards / "train").iterdir())}
    return {
        "loaders": {"files": lambda: loader(data_dir=str(corpus)), "shards": lambda: loader(shards=str(shards))},
        "count": lambda batch: batch.batch_size + len(batch.skipped),
        "bytes": sizes,
        "items": len(files),
        "write_seconds": round(written, 1),
    }


def _images(data: Path, shards: Path, workers: int, batch_size: int, image_size: int) -> dict:
    start = time.perf_counter()
    write_caption_shards(data, str(shards), progress=False)
    written = time.perf_counter() - start
    common = {"batch_size": batch_size, "num_workers": workers, "image_size": image_size, "min_word_freq": 1}
    files = [r.path for r in read_captions(data)[0] if r.split == "train"]
    sizes = {"files": _size(files), "shards": _size((shards / "train").iterdir())}
    return {
        "loaders": {
            "files": lambda: CaptionDataModule(str(data), **common).train_dataloader(),
            "shards": lambda: CaptionDataModule(shards=str(shards), **common).train_dataloader(),
        },
        "count": lambda batch: batch["batch_size"] + len(batch["skipped"]),
        "bytes": sizes,
        "items": len(files),
        "write_seconds": round(written, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.benchmarks.shards", description=__doc__.split("\n\n")[0])
    parser.add_argument("--speech", type=Path, help="a speech corpus folder (e.g. from `speech-attend prepare synth`)")
    parser.add_argument("--images", type=Path, help="a caption data set folder (e.g. from `show-attend prepare shapes`)")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench_shards"), help="where the shards are written")
    parser.add_argument("--workers", type=int, default=0, help="loader processes (default 0: in the measuring process)")
    parser.add_argument("--passes", type=int, default=2, help="epochs read by each loader, in turns (default 2)")
    parser.add_argument("--batch-size", type=int, default=16, help="utterances or images a batch (default 16)")
    parser.add_argument("--image-size", type=int, default=128, help="the captioner's input side (default 128)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    if not args.speech and not args.images:
        parser.error("give --speech DIR, --images DIR or both")
    torch.set_num_threads(1)
    sets = {}
    if args.speech:
        sets["speech"] = _speech(args.speech, args.out / "speech", args.workers, args.batch_size)
    if args.images:
        sets["images"] = _images(args.images, args.out / "images", args.workers, args.batch_size, args.image_size)
    results = {"workers": args.workers, "threads": 1, "batch_size": args.batch_size}
    for name, data in sets.items():
        measured = {}
        for _ in range(args.passes):  # in turns, so both see the same state of the page cache
            for kind, make in data["loaders"].items():
                measured[kind] = measure_loader(make, data["count"])
        for kind in measured:
            measured[kind]["bytes"] = data["bytes"][kind]
        results[name] = {"items": data["items"], "write_seconds": data["write_seconds"], **measured}
        files, shards = measured["files"], measured["shards"]
        ratio = shards["samples_per_cpu_second"] / files["samples_per_cpu_second"]
        print(
            f"{name}: {data['items']} training samples; per core-second files {files['samples_per_cpu_second']}, "
            f"shards {shards['samples_per_cpu_second']} ({ratio:.2f}x); per second files {files['samples_per_second']}, "
            f"shards {shards['samples_per_second']}; first batch files {files['first_batch_seconds']} s "
            f"({files['first_batch_cpu_seconds']} s of processor), shards {shards['first_batch_seconds']} s "
            f"({shards['first_batch_cpu_seconds']} s); bytes files {files['bytes']:,}, shards {shards['bytes']:,}; "
            f"shards written in {data['write_seconds']} s"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
