"""The recognizer's speed target: `speech-attend transcribe` of a 10-second file on one core.

    python -m scripts.benchmarks.transcribe [--ckpt models/speech_attend] [--beams 24,48] [--runs 3] [--file F] [--json]

Without ``--file``, the 10-second file is the shipped model's recorded clips
(``tests/data/shipped/*.flac``) joined and repeated to 10.0 s, written as 16-bit WAV. For each run,
each beam in turn (alternated, so a host that speeds up or slows down weighs on all alike):

- ``command``: the whole ``speech-attend transcribe FILE --beam-size B`` in a fresh process with
  ``OMP_NUM_THREADS=1``, start-up (``import torch``) included: what a user waits for;
- ``decode``: ``Transcriber.transcribe(FILE)`` in this process, one thread, after a warm-up: the
  part that the beam and the model decide.

The target is a command under 3 s. Host speed moves both by a third between machines and within
an hour, so compare beams (or revisions) only within one run of this script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]

SECONDS = 10.0
RATE = 16000
TARGET_SECONDS = 3.0


def ten_second_file(out: Path, clips: list[Path], seconds: float = SECONDS) -> Path:
    """``clips`` joined (mono, 16 kHz) and repeated to exactly ``seconds``, written as 16-bit WAV at ``out``."""
    from speech_attend.data.audio import load_audio

    joined = np.concatenate([load_audio(path, RATE).numpy() for path in clips])
    samples = int(seconds * RATE)
    wave = np.tile(joined, int(np.ceil(samples / len(joined))))[:samples]
    sf.write(out, wave, RATE, subtype="PCM_16")
    return out


def time_command(ckpt: str, audio: Path, beam: int) -> float:
    """Seconds for the whole ``speech-attend transcribe`` in a fresh one-thread process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "speech_attend.cli", "transcribe", str(audio), "--ckpt", ckpt, "--beam-size", str(beam)]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"transcribe failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return seconds


def bench(ckpt: str, audio: Path, beams: list[int], runs: int) -> dict:
    import torch

    from speech_attend.infer.transcribe import Transcriber

    torch.set_num_threads(1)
    transcribers = {beam: Transcriber.load(ckpt, beam_size=beam) for beam in beams}
    for transcriber in transcribers.values():
        transcriber.transcribe(audio)  # warm-up
    results = {beam: {"command": [], "decode": []} for beam in beams}
    for _ in range(runs):
        for beam in beams:
            results[beam]["command"].append(round(time_command(ckpt, audio, beam), 3))
            start = time.perf_counter()
            transcribers[beam].transcribe(audio)
            results[beam]["decode"].append(round(time.perf_counter() - start, 3))
    for r in results.values():
        r["command_median"] = statistics.median(r["command"])
        r["decode_median"] = statistics.median(r["decode"])
        r["under_target"] = r["command_median"] < TARGET_SECONDS
    return {
        "file": str(audio),
        "seconds": SECONDS,
        "ckpt": ckpt,
        "target_seconds": TARGET_SECONDS,
        "beams": {str(beam): r for beam, r in results.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--ckpt",
        default=str(ROOT / "models" / "speech_attend"),
        help="a .ckpt or an exported folder (default: the shipped model)",
    )
    parser.add_argument("--beams", default="24,48", help="comma-separated beam sizes, alternated (default 24,48)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each beam (default 3)")
    parser.add_argument(
        "--file", type=Path, default=None, help="the audio to time (default: 10 s of the shipped model's recorded clips)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        beams = [int(b) for b in args.beams.split(",")]
        if args.runs < 1 or min(beams) < 1:
            raise ValueError
    except ValueError:
        print(
            f"bench_transcribe: error: --beams {args.beams!r} / --runs {args.runs}: expected positive integers", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        audio = args.file or ten_second_file(
            Path(tmp) / "ten_seconds.wav", sorted((ROOT / "tests" / "data" / "shipped").glob("*.flac"))
        )
        try:
            results = bench(args.ckpt, audio, beams, args.runs)
        except (RuntimeError, ValueError, OSError) as err:
            print(f"bench_transcribe: error: {str(err).splitlines()[0]}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(
        f"{'beam':>5}  {'command, s (each run)':<26} {'median':>7}  {'decode, s (each run)':<26} {'median':>7}  under {TARGET_SECONDS:g} s"
    )
    for beam, r in results["beams"].items():
        print(
            f"{beam:>5}  {' / '.join(f'{x:.2f}' for x in r['command']):<26} {r['command_median']:7.2f}  "
            f"{' / '.join(f'{x:.2f}' for x in r['decode']):<26} {r['decode_median']:7.2f}  {'yes' if r['under_target'] else 'NO'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
