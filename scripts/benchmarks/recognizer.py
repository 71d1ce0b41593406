"""Recognizer benchmarks at a paper-like size, fast path against the naive one, in one run.

    python -m scripts.benchmarks.recognizer [--device cpu|cuda] [--quick] [--json]
    python -m scripts.benchmarks.recognizer --against REV [--quick] [--rounds N] [--json]   (this code's training step against REV's)

Model: 80-d log-mel, listener of 1 BLSTM + 3 pyramid BLSTM layers of 256 units per direction,
speller 512 with location-aware attention, 30 characters, joint CTC. Reports:

1. training step time (forward + backward + Adam) of a batch of 16 utterances of 500-1500
   frames, frames per second, and peak memory; and the feature front end's share of it, with the
   mel power as ``re^2 + im^2`` (``LogMel.mel_power``) against torchaudio's ``MelSpectrogram``;
2. the padding fraction of an epoch batched at random against the length-bucketed sampler;
3. beam search (beam 8) over many utterances in one batch against one at a time, same model
   and same code (``Speller.step`` under ``shared.beam_search``, a batch of one), in fp32 and
   under bf16 autocast (both paths), with how many bf16 transcripts equal the fp32 ones.

The model is untrained, so its own end-of-sentence would come at once or never: each
utterance's transcript length is fixed at 15 characters per second of audio (``<eos>`` is
forced at that step and forbidden before), the same in both paths, so both decode exactly the
same number of steps per utterance and the comparison measures batching alone.

bf16 is an option of this benchmark only: the apps train and decode in fp32 unless asked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import random
import resource
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from scripts.benchmarks.common import PRECISIONS, autocast, matmul_gflop, matmul_rate, sync
from shared import Vocabulary, beam_search
from speech_attend.data.sampler import BucketBatchSampler
from speech_attend.model.features import FeatureConfig
from speech_attend.model.las import LAS, LASConfig, native_cpu_kernels


@dataclass
class BenchConfig:
    batch: int = 16
    min_frames: int = 500
    max_frames: int = 1500
    vocab: int = 30 + 4  # characters plus <pad> <sos> <eos> <unk>
    chars_per_second: float = 15.0
    train_repeats: int = 3
    beam: int = 8
    beam_utterances: int = 64
    beam_max_frames: int = 1500
    epoch_utterances: int = 4000  # for the padding comparison


HOP = 160  # 10 ms at 16 kHz


def build_model(cfg: BenchConfig, device) -> LAS:
    torch.manual_seed(0)
    config = LASConfig(
        listener_hidden=256,
        listener_layers=1,
        pyramid_layers=3,
        speller_hidden=512,
        speller_layers=2,
        attention="location",
        attention_dim=256,
        ctc_upsample=2,
    )
    model = LAS(config, FeatureConfig(), Vocabulary([f"c{i}" for i in range(cfg.vocab - 4)])).to(device)
    return model


def synthetic_audio(cfg: BenchConfig, count: int, generator, max_frames: int):
    frames = torch.randint(cfg.min_frames, max_frames + 1, (count,), generator=generator)
    samples = frames * HOP
    waveforms = torch.randn(count, int(samples.max()), generator=generator) * 0.1
    waveforms[torch.arange(waveforms.size(1))[None, :] >= samples[:, None]] = 0
    return waveforms, samples, frames


def train_benchmark(cfg: BenchConfig, device) -> dict:
    generator = torch.Generator().manual_seed(0)
    model = build_model(cfg, device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    waveforms, samples, frames = synthetic_audio(cfg, cfg.batch, generator, cfg.max_frames)
    chars = (frames.float() / 100 * cfg.chars_per_second).long().clamp_min(2)
    targets = torch.randint(4, cfg.vocab, (cfg.batch, int(chars.max()) + 1), generator=generator)
    targets[:, 0] = 1
    targets[torch.arange(targets.size(1))[None, :] > chars[:, None]] = 0
    waveforms, samples, targets = waveforms.to(device), samples.to(device), targets.to(device)

    def step():
        out = model(waveforms, samples, targets[:, :-1])
        loss = F.cross_entropy(out["logits"].float().transpose(1, 2), targets[:, 1:], ignore_index=0)
        ctc = F.ctc_loss(
            out["ctc_log_probs"].transpose(0, 1), targets[:, 1:], out["ctc_lengths"], chars.to(device) - 1, zero_infinity=True
        )
        optimizer.zero_grad(set_to_none=True)
        (0.7 * loss + 0.3 * ctc).backward()
        optimizer.step()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    step()  # warm-up
    times = []
    for _ in range(cfg.train_repeats):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    peak = (
        torch.cuda.max_memory_allocated() / 2**20
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    return {
        "step_seconds": seconds,
        "frames_per_second": float(frames.sum()) / seconds,
        "audio_seconds_per_second": float(frames.sum()) / 100 / seconds,
        "peak_memory_mib": peak,
        "peak_memory_kind": "cuda max allocated"
        if device.type == "cuda"
        else f"process max RSS (was {rss_before:.0f} MiB before)",
    }


def frontend_benchmark(cfg: BenchConfig, device, rounds: int = 10) -> dict:
    """The feature front end's forward on the training batch, and its mel power computed two ways
    (the same features, ``tests/speech_attend/test_recordings.py``), in turn: median seconds of each."""
    model = build_model(cfg, device)
    frontend, logmel = model.frontend, model.frontend.logmel
    waveforms, samples, _ = synthetic_audio(cfg, cfg.batch, torch.Generator().manual_seed(0), cfg.max_frames)
    waveforms, samples = waveforms.to(device), samples.to(device)
    frontend.accumulate_statistics([(waveforms, samples)])
    timed = {
        "frontend": lambda: frontend(waveforms, samples),
        "mel_power_re2_im2": lambda: logmel.mel_power(waveforms),
        "mel_power_torchaudio": lambda: logmel.mel(waveforms),
    }
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    with torch.no_grad():
        for _ in range(rounds):
            for name, run in timed.items():
                sync(device)
                start = time.perf_counter()
                run()
                sync(device)
                seconds[name].append(time.perf_counter() - start)
    return {f"{name}_seconds": float(np.median(times)) for name, times in seconds.items()}


def padding_benchmark(cfg: BenchConfig) -> dict:
    """Fraction of padded frames in one epoch: random batches against length buckets."""
    rng = random.Random(0)
    lengths = [rng.randint(cfg.min_frames, cfg.max_frames) for _ in range(cfg.epoch_utterances)]

    def padding(batches):
        padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
        return 1 - sum(lengths) / padded

    order = list(range(len(lengths)))
    rng.shuffle(order)
    random_batches = [order[i : i + cfg.batch] for i in range(0, len(order), cfg.batch)]
    bucketed = list(BucketBatchSampler(lengths, cfg.batch, seed=0))
    return {"random_batches": padding(random_batches), "bucketed_batches": padding(bucketed)}


def decode(model: LAS, waveforms, samples, chars, cfg: BenchConfig, precision: str = "fp32"):
    """LAS.decode's batched beam search with the transcript length fixed per utterance:
    an untrained model would otherwise stop at once or never. Returns the hypotheses and the
    seconds the listener took.

    bf16 covers the speller: the listener stays fp32 (its LSTMs run on PyTorch's native CPU
    kernels, 3.6x slower under bf16 autocast, measured), and the speller runs on oneDNN, the
    only fast bf16 matrix product on CPU, where fp32 uses the native kernels as LAS.decode does.
    """
    start = time.perf_counter()
    states, encoder_lengths = model.encode(waveforms, samples)
    sync(states.device)
    listener_seconds = time.perf_counter() - start
    bf16 = precision == "bf16"
    if bf16:  # read as is at every step, never cast again
        states = states.to(torch.bfloat16)
    eos = 2

    def step(tokens, state, memory):
        inner, t, length = state
        log_probs, inner, alpha = model.speller.step(tokens, inner, memory)
        ending = (t + 1 > length)[:, None]  # (N, 1): this step must end the transcript
        is_eos = torch.arange(log_probs.size(1), device=tokens.device)[None, :] == eos
        return log_probs.masked_fill(ending != is_eos, float("-inf")), (inner, t + 1, length), alpha

    with contextlib.nullcontext() if bf16 else native_cpu_kernels(), autocast(states.device, precision):
        memory, inner = model.speller.start(states, encoder_lengths)  # one memory row serves the K beams
        state = (inner, torch.zeros_like(chars), chars)
        results = beam_search(
            step, state, waveforms.size(0), cfg.beam, sos=1, eos=eos, max_len=int(chars.max()) + 1, memory=memory
        )
    return results, listener_seconds


def beam_benchmark(cfg: BenchConfig, device, precision: str, rates: dict[str, float]) -> dict:
    """Batched against one utterance at a time, the same model and code, in ``precision``.

    Also the ceiling of the ratio on this machine: the one-at-a-time time over the batched
    path's matrix products alone at the measured matmul rate (nothing else costing anything);
    the listener's at the fp32 rate, as it runs in fp32 in both precisions (see ``_decode``).
    """
    generator = torch.Generator().manual_seed(1)
    model = build_model(cfg, device).eval()
    waveforms, samples, frames = synthetic_audio(cfg, cfg.beam_utterances, generator, cfg.beam_max_frames)
    chars = (frames.float() / 100 * cfg.chars_per_second).long()
    waveforms, samples, chars = waveforms.to(device), samples.to(device), chars.to(device)
    with torch.no_grad():
        decode(model, waveforms[:2, : int(samples[:2].max())], samples[:2], chars[:2], cfg, precision)  # warm-up
        decode(model, waveforms[:1, : int(samples[0])], samples[:1], chars[:1], cfg, precision)
        sync(device)
        start = time.perf_counter()
        batched, batched_listener = decode(model, waveforms, samples, chars, cfg, precision)
        sync(device)
        batched_seconds = time.perf_counter() - start
        start = time.perf_counter()
        single, single_listener = [], 0.0
        for i in range(cfg.beam_utterances):
            one = slice(i, i + 1)
            hyps, seconds = decode(model, waveforms[one, : int(samples[i])], samples[one], chars[one], cfg, precision)
            single.append(hyps[0][0])
            single_listener += seconds
        sync(device)
        single_seconds = time.perf_counter() - start
        gflop = matmul_gflop(lambda: decode(model, waveforms, samples, chars, cfg, precision))  # separate, untimed runs
        listener_gflop = matmul_gflop(lambda: model.encode(waveforms, samples))
    matmul_seconds = listener_gflop / rates["fp32"] + (gflop - listener_gflop) / rates[precision]
    same = sum(b[0].tokens == s.tokens for b, s in zip(batched, single))
    return {
        "precision": precision,
        "utterances": cfg.beam_utterances,
        "beam": cfg.beam,
        "audio_seconds": float(frames.sum()) / 100,
        "mean_output_chars": float(chars.float().mean()),
        "batched_seconds": batched_seconds,
        "one_at_a_time_seconds": single_seconds,
        "same_transcripts": f"{same}/{cfg.beam_utterances}",
        "speedup_batched_beam": single_seconds / batched_seconds,
        "batched_matmul_gflop": gflop,
        "batched_matmul_bound_seconds": matmul_seconds,  # its matrix products at the measured rate
        "speedup_ceiling": single_seconds / matmul_seconds,
        "batched_listener_seconds": batched_listener,
        "one_at_a_time_listener_seconds": single_listener,
        # the beam search alone (speller steps and bookkeeping), the listener's time taken out of both paths
        "speedup_batched_speller": (single_seconds - single_listener) / (batched_seconds - batched_listener),
        "transcripts": [b[0].tokens for b in batched],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and utterances (under 2 minutes on 2 CPU cores)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of results")
    parser.add_argument(
        "--against",
        metavar="REV",
        default=None,
        help="instead: time this code's training step against revision REV's, in turn (scripts/benchmarks/against.py)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="with --against: timed steps of each revision (default 5)")
    args = parser.parse_args(argv)
    if args.against:
        from scripts.benchmarks import against

        result = against.compare("recognizer", args.against, args.quick, args.rounds)
        print(json.dumps(result) if args.json else against.report(result))
        return 0
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    quick = BenchConfig(batch=8, min_frames=300, max_frames=600, train_repeats=1, beam_utterances=32, beam_max_frames=900)
    cfg = quick if args.quick else BenchConfig()
    machine = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"
    if device.type == "cuda":
        machine = f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    print(f"recognizer benchmark on {device} ({machine}); config: {asdict(cfg)}", flush=True)

    train = train_benchmark(cfg, device)
    print(f"\ntraining step (forward + backward + Adam), batch {cfg.batch}, {cfg.min_frames}-{cfg.max_frames} frames")
    print(
        f"  {train['step_seconds']:.2f} s/step, {train['frames_per_second']:.0f} frames/s "
        f"({train['audio_seconds_per_second']:.1f} s of audio per second); peak memory {train['peak_memory_mib']:.0f} MiB "
        f"({train['peak_memory_kind']})",
        flush=True,
    )

    front = frontend_benchmark(cfg, device)
    print(
        f"  the feature front end alone: {front['frontend_seconds'] * 1000:.1f} ms, of which the mel power "
        f"{front['mel_power_re2_im2_seconds'] * 1000:.1f} ms as re^2 + im^2 (torchaudio's MelSpectrogram: "
        f"{front['mel_power_torchaudio_seconds'] * 1000:.1f} ms)",
        flush=True,
    )

    pad = padding_benchmark(cfg)
    print(f"\npadding in an epoch of {cfg.epoch_utterances} utterances, batch {cfg.batch}")
    print(f"  random batches   {pad['random_batches']:6.1%} of frames are padding")
    print(f"  bucketed sampler {pad['bucketed_batches']:6.1%}", flush=True)

    rates = {precision: matmul_rate(device, precision) for precision in PRECISIONS}
    print("\nmeasured matmul rate: " + ", ".join(f"{p} {r:.0f} GFLOP/s" for p, r in rates.items()), flush=True)
    beam = {precision: beam_benchmark(cfg, device, precision, rates) for precision in PRECISIONS}
    fp32_transcripts = beam["fp32"].pop("transcripts")
    bf16_transcripts = beam["bf16"].pop("transcripts")
    beam["bf16"]["same_as_fp32"] = f"{sum(a == b for a, b in zip(fp32_transcripts, bf16_transcripts))}/{cfg.beam_utterances}"
    beam["speedup_batched_beam"] = beam["fp32"]["speedup_batched_beam"]
    print(
        f"\nbeam search (beam {cfg.beam}) over {cfg.beam_utterances} utterances ({beam['fp32']['audio_seconds']:.0f} s of audio, "
        f"{beam['fp32']['mean_output_chars']:.0f} characters on average), same model"
    )
    print(
        f"  {'precision':<11}{'batched s':>11}{'(listener)':>12}{'one at a time s':>17}{'(listener)':>12}{'speedup':>9}"
        f"{'speller only':>14}{'matmul-bound s':>16}{'ceiling':>9}{'batched = single':>18}{'= fp32':>8}"
    )
    for precision in PRECISIONS:
        r = beam[precision]
        print(
            f"  {precision:<11}{r['batched_seconds']:>11.2f}{r['batched_listener_seconds']:>12.2f}"
            f"{r['one_at_a_time_seconds']:>17.2f}{r['one_at_a_time_listener_seconds']:>12.2f}"
            f"{r['speedup_batched_beam']:>8.2f}x{r['speedup_batched_speller']:>13.2f}x"
            f"{r['batched_matmul_bound_seconds']:>16.2f}{r['speedup_ceiling']:>8.2f}x"
            f"{r['same_transcripts']:>18}{r.get('same_as_fp32', '-'):>8}"
        )
    print(
        f"  speedup_batched_beam = {beam['speedup_batched_beam']:.2f}x (fp32), "
        f"{beam['bf16']['speedup_batched_beam']:.2f}x (bf16 autocast)"
    )
    print(
        "  matmul-bound s: the batched path's matrix products alone at the measured matmul rate; ceiling: the\n"
        "  one-at-a-time time over that, the most batching could give on this machine with all else free",
        flush=True,
    )

    results = {
        "device": str(device),
        "machine": machine,
        "quick": args.quick,
        "matmul_gflop_per_s": rates["fp32"],
        "matmul_gflop_per_s_bf16": rates["bf16"],
        "train_step": train,
        "frontend": front,
        "padding": pad,
        "beam": beam,
    }
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
