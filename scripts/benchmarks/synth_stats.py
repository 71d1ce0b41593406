"""Listening by numbers: statistics of a corpus from ``speech-attend prepare synth``, and synthesis speed.

    python -m scripts.benchmarks.synth_stats --corpus DIR
    python -m scripts.benchmarks.synth_stats --text
    python -m scripts.benchmarks.synth_stats --speed [--sentences 40]

``--corpus``: utterances per split and engine, distinct words, the share of dev and test words
(running words and distinct words) never in the training transcripts, durations (percentiles),
peak and RMS levels, clipped samples (|x| >= 0.999) and non-finite samples, per engine.
``--text``: the WordNet text: sentences and distinct words per split, and the share of dev and
test words never in the training sentences that a corpus of 4000, 20000 or all training
utterances speaks.
``--speed``: seconds of audio made per second of one CPU core by each engine (eSpeak NG and, when
installed, piper with its pitch and formant shift), over WordNet training sentences.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from speech_attend.builtin import corpus
from speech_attend.builtin.piper_voice import PiperEngine, missing_packages
from speech_attend.builtin.speakers import espeak_speakers, piper_speakers
from speech_attend.builtin.wordnet_sentences import load_sentences, oov_rates, split_sentences
from speech_attend.data.readers import read_librispeech


def _percentiles(values: list[float]) -> dict[str, float]:
    return {f"p{q}": round(float(np.percentile(values, q)), 3) for q in (0, 5, 50, 95, 100)} if values else {}


def corpus_statistics(corpus: Path) -> dict:
    """Counts, vocabulary, OOV rates, durations and levels of a prepared corpus."""
    roles = json.loads((corpus / "speakers.json").read_text())
    texts = {
        split: [u.text.lower() for u in read_librispeech(corpus, [split])] if (corpus / split).is_dir() else []
        for split in corpus.SPLITS
    }
    stats: dict = {
        "utterances": {s: len(t) for s, t in texts.items()},
        "distinct_words": {s: len({w for t in ts for w in t.split()}) for s, ts in texts.items()},
    }
    stats["oov_vs_train_transcripts"] = {s: oov_rates(texts["train"], texts[s]) for s in ("dev", "test") if texts[s]}
    audio: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for split in corpus.SPLITS:
        if not texts[split]:
            continue
        for u in read_librispeech(corpus, [split]):
            wave, rate = sf.read(u.audio_path, dtype="float32")
            engine = roles[u.speaker].get("engine", "espeak")
            a = audio[engine]
            a["seconds"].append(len(wave) / rate)
            a["peak_dbfs"].append(20 * np.log10(max(float(np.abs(wave).max()), 1e-9)))
            a["rms_dbfs"].append(10 * np.log10(max(float(np.mean(wave.astype(np.float64) ** 2)), 1e-18)))
            a["clipped_samples"].append(int(np.sum(np.abs(wave) >= 0.999)))
            a["nonfinite_samples"].append(int(np.sum(~np.isfinite(wave))))
            a["seconds_per_word"].append(len(wave) / rate / len(u.text.split()))
    stats["audio"] = {
        engine: {
            "utterances": len(a["seconds"]),
            "hours": round(sum(a["seconds"]) / 3600, 3),
            "seconds": _percentiles(a["seconds"]),
            "seconds_per_word": _percentiles(a["seconds_per_word"]),
            "peak_dbfs": _percentiles(a["peak_dbfs"]),
            "rms_dbfs": _percentiles(a["rms_dbfs"]),
            "clipped_samples": int(sum(a["clipped_samples"])),
            "nonfinite_samples": int(sum(a["nonfinite_samples"])),
        }
        for engine, a in audio.items()
    }
    return stats


def text_statistics() -> dict:
    """Sentences, distinct words and OOV rates of the WordNet text, for corpora of several sizes."""
    pools = corpus.sentence_pools("wordnet", seed=0)  # in the order a seed-0 corpus speaks them
    stats: dict = {
        "sentences": {split: len(pool) for split, pool in pools.items()},
        "distinct_words": {split: len({w for s in pool for w in s.split()}) for split, pool in pools.items()},
        "words_per_sentence": _percentiles([len(s.split()) for pool in pools.values() for s in pool]),
    }
    for size in (4000, 20000, len(pools["train"])):
        train = pools["train"][:size]
        stats[f"oov_with_{size}_training_sentences"] = {split: oov_rates(train, pools[split]) for split in ("dev", "test")}
    return stats


def synthesis_speed(count: int) -> dict:
    """Seconds of 16 kHz audio per second of one core, per engine, on WordNet training sentences."""
    torch.set_num_threads(1)
    rng = random.Random(0)
    sentences = rng.sample(split_sentences(load_sentences())["train"], count)
    speeds = {}
    espeak = [s for s in espeak_speakers() if s.split == "train"]
    start, audio = time.perf_counter(), 0.0
    for sentence in sentences:
        speaker = rng.choice(espeak)
        audio += corpus.speak(sentence, speaker.espeak_name, rate=175, pitch=50, volume=50).numel() / corpus.SAMPLE_RATE
    speeds["espeak"] = {"audio_seconds": round(audio, 1), "x_real_time": round(audio / (time.perf_counter() - start), 1)}
    if not missing_packages():
        piper = [s for s in piper_speakers() if s.split == "train"]
        start, audio = time.perf_counter(), 0.0
        engine = PiperEngine(seed=0)  # included: one session per block of 16 utterances in prepare_synth
        for sentence in sentences:
            wave = corpus.speak_piper(engine, sentence, rng.choice(piper), 1.0, 0.667, 0.8, 0.9)
            audio += len(wave) / corpus.SAMPLE_RATE
        speeds["piper"] = {"audio_seconds": round(audio, 1), "x_real_time": round(audio / (time.perf_counter() - start), 1)}
    return speeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, help="a folder written by speech-attend prepare synth")
    parser.add_argument("--text", action="store_true", help="statistics of the WordNet text")
    parser.add_argument("--speed", action="store_true", help="measure synthesis speed on one core")
    parser.add_argument("--sentences", type=int, default=40, help="sentences per engine for --speed (default: 40)")
    args = parser.parse_args(argv)
    if not (args.corpus or args.text or args.speed):
        parser.error("give --corpus DIR, --text and/or --speed")
    result = {}
    if args.text:
        result["text"] = text_statistics()
    if args.corpus:
        result["corpus"] = corpus_statistics(args.corpus)
    if args.speed:
        result["speed"] = synthesis_speed(args.sentences)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
