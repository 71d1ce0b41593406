"""What the training conditions cost: ``augment_batch`` against one training step, same batch.

    python -m scripts.benchmarks.augment --data DIR [--config configs/speech_attend/synth_las.yaml] [--batch 16] [--threads 1]

Reads ``--batch`` training utterances of a corpus, then times (median of 5, after a warm-up)
:func:`speech_attend.data.augment.augment_batch` with the default :class:`AugmentConfig` and with every
condition on, and one training step (forward, backward and Adam with joint CTC, random targets
of 15 characters per second) of the model in ``--config`` on the same batch.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml

from shared import Vocabulary
from speech_attend.data.augment import AugmentConfig, augment_batch
from speech_attend.data.dataset import SpeechDataset, collate
from speech_attend.data.readers import read_corpus
from speech_attend.model.features import FeatureConfig
from speech_attend.model.las import LAS, LASConfig

_VOCAB = 30 + 4  # characters plus <pad> <sos> <eos> <unk>


def _median_seconds(fn, repeats: int = 5) -> float:
    fn()  # warm-up (kernels and resamplers are built once)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="corpus folder with a train split")
    parser.add_argument("--config", type=Path, default=Path("configs/speech_attend/synth_las.yaml"))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    dataset = SpeechDataset(read_corpus(args.data, "train")[: args.batch], 16000)
    batch = collate([dataset[i] for i in range(len(dataset))])
    seconds_of_audio = float(batch.lengths.sum()) / 16000

    generator = torch.Generator().manual_seed(0)
    default = _median_seconds(lambda: augment_batch(batch.waveforms, batch.lengths, AugmentConfig(), 16000, generator))
    everything = AugmentConfig(speed_prob=1, silence_prob=1, reverb_prob=1, noise_prob=1, low_rate_prob=1, gain_prob=1)
    full = _median_seconds(lambda: augment_batch(batch.waveforms, batch.lengths, everything, 16000, generator))

    model_config = yaml.safe_load(args.config.read_text())["model"]
    torch.manual_seed(0)
    vocabulary = Vocabulary([f"c{i}" for i in range(_VOCAB - 4)])
    model = LAS(LASConfig(**model_config["las"]), FeatureConfig(**model_config.get("features", {})), vocabulary).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    chars = (batch.lengths.float() / 16000 * 15).long().clamp_min(2)
    targets = torch.randint(4, _VOCAB, (len(chars), int(chars.max()) + 1), generator=generator)
    targets[:, 0] = 1
    targets[torch.arange(targets.size(1))[None, :] > chars[:, None]] = 0

    def step():
        out = model(batch.waveforms, batch.lengths, targets[:, :-1])
        loss = F.cross_entropy(out["logits"].float().transpose(1, 2), targets[:, 1:], ignore_index=0)
        ctc = F.ctc_loss(out["ctc_log_probs"].transpose(0, 1), targets[:, 1:], out["ctc_lengths"], chars - 1, zero_infinity=True)
        optimizer.zero_grad(set_to_none=True)
        (0.7 * loss + 0.3 * ctc).backward()
        optimizer.step()

    train = _median_seconds(step)
    print(f"batch of {len(chars)} utterances, {seconds_of_audio:.1f} s of audio, {args.threads} thread(s)")
    print(f"  augment_batch, default AugmentConfig   {default * 1000:7.1f} ms  ({default / train:.1%} of a training step)")
    print(f"  augment_batch, every condition on      {full * 1000:7.1f} ms  ({full / train:.1%} of a training step)")
    print(f"  training step ({args.config.name} model) {train * 1000:7.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
