"""Long recordings against the same speech one utterance per file: what chunking costs.

    python scripts/long_audio_check.py --ckpt CKPT --data DIR [--per-file 10] [--pause 0.25] [--no-trim]

Joins the test utterances of each speaker of a LibriSpeech-layout corpus (``DIR/test`` of
``speech-attend prepare synth``) into one long file, ``--pause`` seconds of silence between
utterances, then transcribes the long files (split at pauses into chunks by ``transcribe``) and
the utterances one file each, and prints the word and character error rates of both. Chunking
works when the two agree.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import jiwer
import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from speech_attend.infer.transcribe import Transcriber  # noqa: E402


def _references(test_dir: Path) -> dict[str, str]:
    references = {}
    for transcript in test_dir.rglob("*.trans.txt"):
        for line in transcript.read_text().splitlines():
            key, text = line.split(" ", 1)
            references[key] = text.lower()
    return references


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="a .ckpt from fit, or a folder from export")
    parser.add_argument("--data", required=True, type=Path, help="corpus folder with a test/ split (LibriSpeech layout)")
    parser.add_argument("--per-file", type=int, default=10, help="utterances joined into each long file (default: 10)")
    parser.add_argument("--pause", type=float, default=0.25, help="seconds of silence between them (default: 0.25)")
    parser.add_argument("--no-trim", action="store_true", help="decode chunks with their quiet edges (transcribe trims them)")
    args = parser.parse_args(argv)
    test_dir = args.data / "test"
    references = _references(test_dir)
    by_speaker = defaultdict(list)
    for path in sorted(test_dir.rglob("*.flac")):
        by_speaker[path.parent.parent.name].append(path)
    transcriber = Transcriber(args.ckpt, trim=not args.no_trim)
    with tempfile.TemporaryDirectory() as tmp:
        long_files, long_references = [], []
        for speaker, paths in by_speaker.items():
            paths = paths[: args.per_file]
            pieces = []
            for path in paths:
                audio, rate = sf.read(path, dtype="float32")
                pieces += [audio, np.zeros(int(args.pause * rate), dtype=np.float32)]
            long_files.append(Path(tmp) / f"{speaker}.flac")
            sf.write(long_files[-1], np.concatenate(pieces[:-1]), rate)
            long_references.append(" ".join(references[p.name.removesuffix(".flac")] for p in paths))
        singles = [p for paths in by_speaker.values() for p in paths[: args.per_file]]
        start = time.perf_counter()
        long_results = [transcriber.transcribe(f) for f in long_files]
        long_seconds = time.perf_counter() - start
        single_texts = [transcriber.transcribe(f).text for f in singles]
    single_references = [references[p.name.removesuffix(".flac")] for p in singles]
    long_texts = [r.text for r in long_results]
    audio = sum(r.duration_s for r in long_results)
    print(
        f"{len(long_files)} long files ({audio:.0f} s of audio, max chunk {transcriber.max_chunk_seconds} s, "
        f"{sum(r.chunks for r in long_results)} chunks, decoded in {long_seconds:.0f} s)"
    )
    print(
        f"  long files        WER {jiwer.wer(long_references, long_texts):.4f}  CER {jiwer.cer(long_references, long_texts):.4f}"
    )
    print(
        f"  one file each     WER {jiwer.wer(single_references, single_texts):.4f}  CER {jiwer.cer(single_references, single_texts):.4f}"
        f"  ({len(singles)} utterances)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
