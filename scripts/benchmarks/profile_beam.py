"""Where the batched beam search's time goes, against the budget a speedup target leaves.

    python -m scripts.benchmarks.profile_beam captioner|recognizer [--target X] [--top N]

Runs the full-size batched decode of :mod:`scripts.benchmarks.captioner` (100 images, beam 5) or
:mod:`scripts.benchmarks.recognizer` (64 utterances, beam 8), times it and the one-at-a-time decode, then profiles one
more batched decode with ``torch.profiler`` and prints the operators by self time. The line that
matters: the matrix-product kernels' time alone against ``one_at_a_time / target``, the most the
whole batched decode may take. When the kernels alone exceed it, no amount of work on the rest
of the decode reaches the target on this machine.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import profile

MATRIX_PRODUCTS = {
    "aten::addmm",
    "aten::mm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::addbmm",
    "aten::_slow_conv2d_forward",
    "aten::mkldnn_convolution",
    "aten::convolution",
}
TARGETS = {"captioner": 8.0, "recognizer": 5.0}  # the speedups of batched beam search asked of each app


def _captioner():
    from scripts.benchmarks import captioner as bench
    from show_attend.model.decoder import Decoder

    cfg = bench.BenchConfig()
    decoder = bench.build_decoder(Decoder, cfg, torch.device("cpu")).eval()
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(cfg.beam_images, cfg.grid**2, cfg.feature_dim, generator=generator)
    lengths = torch.randint(cfg.min_len, cfg.max_len + 1, (cfg.beam_images,), generator=generator)

    def batched():
        bench.decode(decoder, features, lengths, cfg)

    def one_at_a_time():
        for i in range(cfg.beam_images):
            bench.decode(decoder, features[i : i + 1], lengths[i : i + 1], cfg)

    return batched, one_at_a_time


def _recognizer():
    from scripts.benchmarks import recognizer as bench

    cfg = bench.BenchConfig()
    model = bench.build_model(cfg, torch.device("cpu")).eval()
    waveforms, samples, frames = bench.synthetic_audio(
        cfg, cfg.beam_utterances, torch.Generator().manual_seed(1), cfg.beam_max_frames
    )
    chars = (frames.float() / 100 * cfg.chars_per_second).long()

    def batched():
        bench.decode(model, waveforms, samples, chars, cfg)

    def one_at_a_time():
        for i in range(cfg.beam_utterances):
            one = slice(i, i + 1)
            bench.decode(model, waveforms[one, : int(samples[i])], samples[one], chars[one], cfg)

    return batched, one_at_a_time


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("app", choices=sorted(TARGETS))
    parser.add_argument("--target", type=float, help="speedup to budget for (default: 8 for the captioner, 5 for the recognizer)")
    parser.add_argument("--top", type=int, default=12, help="operators to list (default: 12)")
    args = parser.parse_args(argv)
    target = args.target or TARGETS[args.app]
    batched, one_at_a_time = _captioner() if args.app == "captioner" else _recognizer()
    with torch.no_grad():
        batched()  # warm-up
        batched_seconds, single_seconds = _seconds(batched), _seconds(one_at_a_time)
        with profile() as prof:
            batched()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    products = sum(e.self_cpu_time_total for e in events if e.key in MATRIX_PRODUCTS) / 1e6
    profiled = sum(e.self_cpu_time_total for e in events) / 1e6
    budget = single_seconds / target
    print(
        f"{args.app}: batched {batched_seconds:.2f} s, one at a time {single_seconds:.2f} s: "
        f"{single_seconds / batched_seconds:.2f}x ({torch.get_num_threads()} threads)"
    )
    print(
        f"budget for {target:g}x: {budget:.2f} s; matrix-product kernels alone: {products:.2f} s "
        f"(of {profiled:.2f} s profiled) -> {'within' if products <= budget else 'OVER'} the budget"
    )
    print(f"\n  {'operator':<34}{'self s':>8}{'calls':>8}")
    for event in events[: args.top]:
        print(f"  {event.key:<34}{event.self_cpu_time_total / 1e6:>8.3f}{event.count:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
