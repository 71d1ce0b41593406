"""Captioner benchmarks at the paper's size, fast path against the naive one, in one run.

    python -m scripts.benchmarks.captioner [--device cpu|cuda] [--quick] [--json]
    python -m scripts.benchmarks.captioner --against REV [--quick] [--rounds N] [--json]   (this code's training step against REV's)

1. Training step (forward + backward + Adam) of the Show, Attend and Tell decoder on a 14x14
   grid of 2048-d features, embedding/attention/LSTM 512, 10,000 words, batch 32, captions of
   10-22 tokens: feature projection computed once per image (ours) against recomputed at every
   step (what the most-used tutorial does), in fp32 and under bf16 autocast. Also reports
   achieved GFLOP/s against the machine's measured matrix-multiply rate of the same precision.
2. Beam search (beam 5) over many images in one batch against one image at a time, same model
   and same code (``Decoder.step`` under ``shared.beam_search``, a batch of one), in fp32 and
   under bf16 autocast (both paths), with how many bf16 captions equal the fp32 ones.
3. An epoch over Flickr8k-sized training data (6,000 images, one caption each): features read
   from the memory-mapped feature cache against running a frozen ResNet-101 on every batch.

bf16 is an option of this benchmark only: the apps train and decode in fp32 unless asked.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from scripts.benchmarks.common import PRECISIONS, autocast, matmul_gflop, matmul_rate, sync, timed
from shared import beam_search, lengths_to_mask
from show_attend.model.decoder import Decoder, DecoderConfig
from show_attend.model.encoder import Encoder, EncoderConfig
from show_attend.train.module import doubly_stochastic_penalty


@dataclass
class BenchConfig:
    batch: int = 32
    grid: int = 14  # L = 196 locations
    feature_dim: int = 2048  # ResNet-101
    size: int = 512  # embedding, attention and LSTM
    vocab: int = 10_000
    min_len: int = 10
    max_len: int = 22
    train_repeats: int = 5
    beam: int = 5
    beam_images: int = 100
    epoch_images: int = 6000  # Flickr8k train
    epoch_batches: int = 4  # batches timed to estimate an epoch


class RecomputedKeysDecoder(Decoder):
    """The naive decoder: projects all L features again at every step (the tutorial's way)."""

    def _attend(self, h, memory, sample):
        memory = memory._replace(projected_keys=self.attention.score.precompute(memory.values))
        return super()._attend(h, memory, sample)


def build_decoder(cls, cfg: BenchConfig, device) -> Decoder:
    config = DecoderConfig(embed_dim=cfg.size, attention_dim=cfg.size, hidden_dim=cfg.size, dropout=0.5)
    torch.manual_seed(0)
    return cls(config, cfg.vocab, cfg.feature_dim).to(device)


def _batch(cfg: BenchConfig, device, generator):
    lengths = torch.randint(cfg.min_len, cfg.max_len + 1, (cfg.batch,), generator=generator)
    captions = torch.randint(4, cfg.vocab, (cfg.batch, cfg.max_len + 1), generator=generator)
    captions[:, 0] = 1  # <sos>
    captions[torch.arange(cfg.max_len + 1)[None, :] > lengths[:, None]] = 0  # <pad> after each caption
    features = torch.randn(cfg.batch, cfg.grid**2, cfg.feature_dim, generator=generator)
    return features.to(device), captions.to(device), lengths.to(device)


def train_step_benchmark(cfg: BenchConfig, device: torch.device) -> dict:
    generator = torch.Generator().manual_seed(0)
    features, captions, lengths = _batch(cfg, device, generator)
    step_mask = lengths_to_mask(lengths, cfg.max_len)
    results = {}
    runs = (
        ("precomputed_keys", Decoder, "fp32"),
        ("recomputed_keys", RecomputedKeysDecoder, "fp32"),
        ("precomputed_keys_bf16", Decoder, "bf16"),
    )
    for name, cls, precision in runs:
        decoder = build_decoder(cls, cfg, device).train()
        optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-4)

        def step():
            with autocast(device, precision):  # forward and loss; backward follows the forward's dtypes
                out = decoder.score(features, captions, lengths)  # the real steps only, as in training
                loss = -out.log_probs.sum(1).mean()
                loss = loss + doubly_stochastic_penalty(out.alphas.float(), step_mask).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        with FlopCounterMode(display=False) as counter:
            step()
        seconds = timed(step, cfg.train_repeats, device)
        flops = counter.get_total_flops()
        results[name] = {
            "precision": precision,
            "step_seconds": seconds,
            "gflop": flops / 1e9,
            "gflop_per_s": flops / seconds / 1e9,
        }
    results["speedup_precomputed_keys"] = results["recomputed_keys"]["step_seconds"] / results["precomputed_keys"]["step_seconds"]
    results["speedup_bf16"] = results["precomputed_keys"]["step_seconds"] / results["precomputed_keys_bf16"]["step_seconds"]
    return results


def _force_length(log_probs: torch.Tensor, ending: torch.Tensor, eos: int) -> torch.Tensor:
    """``<eos>`` forbidden in rows that go on and the only choice in rows that must end (``ending`` `(N,)`)."""
    eos_log_probs = log_probs[:, eos].clone()
    log_probs[:, eos] = float("-inf")
    rows = ending.nonzero().squeeze(1)
    log_probs[rows] = float("-inf")
    log_probs[rows, eos] = eos_log_probs[rows]
    return log_probs


def decode(decoder: Decoder, features: torch.Tensor, lengths: torch.Tensor, cfg: BenchConfig):
    """The captioner's batched beam search (as in Captioner.search), with caption lengths
    fixed per image: an untrained model would otherwise stop at once or never, and the
    benchmark should decode captions of realistic length (10-22 tokens)."""
    memory, (h, c) = decoder.start(features)  # one memory row serves all beams of an image
    eos = 2

    def step(tokens, state, memory):
        h, c, t, length = state
        log_probs, (h, c), alpha = decoder.step(tokens, (h, c), memory)
        return _force_length(log_probs, t + 1 > length, eos), (h, c, t + 1, length), alpha

    state = (h, c, torch.zeros_like(lengths), lengths)
    return beam_search(step, state, features.size(0), cfg.beam, sos=1, eos=eos, max_len=cfg.max_len + 1, memory=memory)


def beam_benchmark(cfg: BenchConfig, device: torch.device, precision: str, matmul_gflop_per_s: float) -> dict:
    """Batched against one image at a time, the same decoder and code, in ``precision``.

    Also the ceiling of the ratio on this machine: the one-at-a-time time over the batched
    path's matrix products alone at the measured matmul rate (nothing else costing anything).
    """
    decoder = build_decoder(Decoder, cfg, device).eval()
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(cfg.beam_images, cfg.grid**2, cfg.feature_dim, generator=generator).to(device)
    lengths = torch.randint(cfg.min_len, cfg.max_len + 1, (cfg.beam_images,), generator=generator).to(device)
    if precision == "bf16":  # what an encoder under autocast hands over; read as is at every step, never cast again
        features = features.to(torch.bfloat16)
    with torch.no_grad(), autocast(device, precision):
        decode(decoder, features[:2], lengths[:2], cfg)  # warm-up
        decode(decoder, features[:1], lengths[:1], cfg)
        sync(device)
        start = time.perf_counter()
        batched = decode(decoder, features, lengths, cfg)
        sync(device)
        batched_seconds = time.perf_counter() - start
        start = time.perf_counter()
        single = [decode(decoder, features[i : i + 1], lengths[i : i + 1], cfg)[0] for i in range(cfg.beam_images)]
        sync(device)
        single_seconds = time.perf_counter() - start
        gflop = matmul_gflop(lambda: decode(decoder, features, lengths, cfg))  # a separate, untimed run
    matmul_seconds = gflop / matmul_gflop_per_s
    same = sum(b[0].tokens == s[0].tokens for b, s in zip(batched, single))
    mean_len = float(np.mean([len(b[0].tokens) for b in batched]))
    return {
        "precision": precision,
        "images": cfg.beam_images,
        "beam": cfg.beam,
        "mean_caption_tokens": mean_len,
        "batched_seconds": batched_seconds,
        "one_at_a_time_seconds": single_seconds,
        "images_per_s_batched": cfg.beam_images / batched_seconds,
        "same_captions": f"{same}/{cfg.beam_images}",
        "speedup_batched_beam": single_seconds / batched_seconds,
        "batched_matmul_gflop": gflop,
        "batched_matmul_bound_seconds": matmul_seconds,  # its matrix products at the measured rate
        "speedup_ceiling": single_seconds / matmul_seconds,
        "captions": [b[0].tokens for b in batched],
    }


def epoch_benchmark(cfg: BenchConfig, device: torch.device) -> dict:
    """Per-batch time of a decoder training step fed by (a) a frozen ResNet-101, (b) the cache."""
    encoder = Encoder(EncoderConfig(backbone="resnet101", pretrained=False, grid_size=cfg.grid)).to(device).eval()
    decoder = build_decoder(Decoder, cfg, device).train()
    optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(2)
    _, captions, lengths = _batch(cfg, device, generator)
    images = torch.randn(cfg.batch, 3, 224, 224, generator=generator).to(device)

    with tempfile.TemporaryDirectory() as tmp:  # a cache of this epoch's size, in the real format
        cache = np.lib.format.open_memmap(
            Path(tmp) / "train.npy",
            mode="w+",
            dtype=np.float16,
            shape=(cfg.epoch_batches * cfg.batch, cfg.grid**2, cfg.feature_dim),
        )
        cache[:] = np.random.default_rng(0).standard_normal(cache.shape[1:], dtype=np.float32).astype(np.float16)
        cache.flush()
        cache = np.load(Path(tmp) / "train.npy", mmap_mode="r")

        def train(features):
            loss = -decoder.score(features, captions, lengths).log_probs.sum(1).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        def from_encoder(i=[0]):
            with torch.no_grad():
                features = encoder(images)
            train(features)

        def from_cache(i=[0]):
            rows = slice((i[0] % cfg.epoch_batches) * cfg.batch, (i[0] % cfg.epoch_batches + 1) * cfg.batch)
            i[0] += 1
            train(torch.from_numpy(np.array(cache[rows], dtype=np.float32)).to(device))

        encoder_seconds = timed(from_encoder, cfg.epoch_batches, device)
        cache_seconds = timed(from_cache, cfg.epoch_batches, device)
    batches = cfg.epoch_images / cfg.batch
    return {
        "epoch_images": cfg.epoch_images,
        "epoch_seconds_frozen_resnet101": encoder_seconds * batches,
        "epoch_seconds_feature_cache": cache_seconds * batches,
        "speedup_feature_cache": encoder_seconds / cache_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and images (under 2 minutes on 2 CPU cores)")
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

        result = against.compare("captioner", args.against, args.quick, args.rounds)
        print(json.dumps(result) if args.json else against.report(result))
        return 0
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    cfg = BenchConfig(train_repeats=2, beam_images=40, epoch_batches=2) if args.quick else BenchConfig()
    torch.manual_seed(0)

    machine = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"
    if device.type == "cuda":
        machine = f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    print(f"captioner benchmark on {device} ({machine}); config: {asdict(cfg)}", flush=True)
    rates = {precision: matmul_rate(device, precision) for precision in PRECISIONS}
    print("measured matmul rate: " + ", ".join(f"{p} {r:.0f} GFLOP/s" for p, r in rates.items()), flush=True)

    train = train_step_benchmark(cfg, device)
    print("\ntraining step (forward + backward + Adam), batch 32, paper size")
    print(f"  {'path':<24}{'s/step':>10}{'GFLOP':>10}{'GFLOP/s':>10}{'% of matmul':>13}")
    for name in ("precomputed_keys", "recomputed_keys", "precomputed_keys_bf16"):
        r = train[name]
        print(
            f"  {name:<24}{r['step_seconds']:>10.3f}{r['gflop']:>10.1f}{r['gflop_per_s']:>10.1f}"
            f"{100 * r['gflop_per_s'] / rates[r['precision']]:>12.0f}%"
        )
    print(
        f"  speedup_precomputed_keys = {train['speedup_precomputed_keys']:.2f}x, bf16 autocast = {train['speedup_bf16']:.2f}x",
        flush=True,
    )

    beam = {precision: beam_benchmark(cfg, device, precision, rates[precision]) for precision in PRECISIONS}
    fp32_captions = beam["fp32"].pop("captions")
    bf16_captions = beam["bf16"].pop("captions")
    beam["bf16"]["same_as_fp32"] = f"{sum(a == b for a, b in zip(fp32_captions, bf16_captions))}/{cfg.beam_images}"
    beam["speedup_batched_beam"] = beam["fp32"]["speedup_batched_beam"]
    print(
        f"\nbeam search (beam {cfg.beam}) over {cfg.beam_images} images, same model, "
        f"captions of {cfg.min_len}-{cfg.max_len} words"
    )
    print(
        f"  {'precision':<11}{'batched s':>11}{'images/s':>10}{'one at a time s':>17}{'speedup':>9}"
        f"{'matmul-bound s':>16}{'ceiling':>9}{'batched = single':>18}{'= fp32':>8}"
    )
    for precision in PRECISIONS:
        r = beam[precision]
        print(
            f"  {precision:<11}{r['batched_seconds']:>11.2f}{r['images_per_s_batched']:>10.1f}"
            f"{r['one_at_a_time_seconds']:>17.2f}{r['speedup_batched_beam']:>8.2f}x"
            f"{r['batched_matmul_bound_seconds']:>16.2f}{r['speedup_ceiling']:>8.2f}x{r['same_captions']:>18}"
            f"{r.get('same_as_fp32', '-'):>8}"
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

    epoch = epoch_benchmark(cfg, device)
    print(f"\nan epoch of {cfg.epoch_images} images (estimated from {cfg.epoch_batches} timed batches)")
    print(f"  frozen ResNet-101 every batch {epoch['epoch_seconds_frozen_resnet101']:10.0f} s")
    print(f"  memory-mapped feature cache   {epoch['epoch_seconds_feature_cache']:10.0f} s")
    print(f"  speedup_feature_cache = {epoch['speedup_feature_cache']:.2f}x")

    results = {
        "device": str(device),
        "machine": machine,
        "quick": args.quick,
        "matmul_gflop_per_s": rates["fp32"],
        "matmul_gflop_per_s_bf16": rates["bf16"],
        "train_step": train,
        "beam": beam,
        "epoch": epoch,
    }
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
