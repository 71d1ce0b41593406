"""Time a training step of this code against another revision's, side by side in one run.

    python -m scripts.benchmarks.against captioner|recognizer --against REV [--quick] [--rounds N] [--json]

``scripts.benchmarks.captioner --against REV`` and ``scripts.benchmarks.recognizer --against REV`` call this. The other
revision is checked out into a temporary git worktree; each revision runs in a worker process
of its own (``python -m scripts.benchmarks.against --worker ...`` with that tree first on the import
path), which builds its model at the benchmark's size and a fixed batch. Both workers start
from the same weights (copied from the other revision's model: this tree loads older layouts
through its models' key maps, an older tree cannot read newer ones), both must compute the same loss on the
same batch (to fp32 tolerance), so that a speedup cannot come from computing something else;
then they take steps in turn (this, other, this, other, ...) so that both see the same machine,
and the ratio of their median step times is reported.

Sizes:

* captioner: the paper's: batch 32, 14x14 grid of 2048-d features, embedding, attention and
  LSTM 512, 9,490 words, captions of 10-22 tokens; the step is the LightningModule's training
  loss (forward, backward, Adam) on given features;
* recognizer: the best-known PyTorch LAS recipe's LibriSpeech sizes: 80-d features, batch of 16
  utterances of 1,000 frames, a BLSTM and 3 pyramidal BLSTMs of 256 units per direction,
  location-aware attention of 300 with 10 filters of width 101, a one-layer speller of 512 with
  an embedding of 512, 31 characters, 150 characters per utterance, no CTC.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4  # relative: fp32 losses summed in another order still agree to this


# ----------------------------------------------------------------------------- the worker


def _captioner(quick: bool):
    import torch

    try:
        import show_attend.train.module as module
    except ImportError:  # a tree from before the apps had folders
        import show_attend.module as module

    cls = getattr(module, "CaptionerModule", None) or module.Captioner  # this tree's name, or an older one's
    words = 1200 if quick else 9490
    size = 256 if quick else 512
    torch.manual_seed(0)
    model = cls(
        [f"w{i}" for i in range(words)],
        encoder={"backbone": "resnet101", "pretrained": False},
        decoder={"embed_dim": size, "attention_dim": size, "hidden_dim": size, "dropout": 0.0},
        doubly_stochastic=1.0,
    ).train()
    decoder = model.model.decoder if hasattr(model, "model") else model.decoder
    generator = torch.Generator().manual_seed(1)
    batch_size, grid = (16, 10) if quick else (32, 14)
    lengths = torch.randint(10, 23, (batch_size,), generator=generator)  # <eos> included
    captions = torch.randint(4, words + 4, (batch_size, 23), generator=generator)
    captions[:, 0] = 1
    captions[torch.arange(23)[None, :] > lengths[:, None]] = 0
    batch = {
        "captions": captions[:, : int(lengths.max()) + 1],
        "lengths": lengths,
        "batch_size": batch_size,
        "features": torch.randn(batch_size, grid * grid, 2048, generator=generator),
    }
    optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-4)
    return decoder, lambda: model.loss(batch)[0], optimizer


def _recognizer(quick: bool):
    import torch
    import torch.nn.functional as F

    try:
        from speech_attend.model.features import FeatureConfig
        from speech_attend.model.las import LAS, LASConfig
    except ImportError:  # a tree from before the apps had folders
        from speech_attend.features import FeatureConfig
        from speech_attend.model import LAS, LASConfig

    torch.manual_seed(0)
    config = LASConfig(
        listener_hidden=256,
        listener_layers=1,
        pyramid_layers=3,
        speller_hidden=512,
        speller_layers=1,
        embedding_dim=512,
        attention="location",
        attention_dim=300,
        location_filters=10,
        location_kernel=101,
        dropout=0.0,
        ctc_upsample=0,
    )
    from shared import Vocabulary

    vocabulary = Vocabulary([f"c{i}" for i in range(31)])
    takes_vocabulary = "vocabulary" in inspect.signature(LAS).parameters  # older trees take its size
    model = LAS(config, FeatureConfig(freq_masks=0, time_masks=0), vocabulary if takes_vocabulary else len(vocabulary)).train()
    generator = torch.Generator().manual_seed(1)
    batch, frames, chars = (8, 500, 75) if quick else (16, 1000, 150)
    samples = (frames - 1) * 160 + 400  # exactly `frames` 10 ms frames of 25 ms windows
    waves = torch.randn(batch, samples, generator=generator) * 0.1
    lengths = torch.full((batch,), samples)
    targets = torch.randint(4, 35, (batch, chars + 1), generator=generator)
    targets[:, 0] = 1
    with torch.no_grad():  # the feature statistics, as fit sets them
        model.frontend.accumulate_statistics([(waves, lengths)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def loss():
        logits = model(waves, lengths, targets[:, :-1])["logits"]
        return F.cross_entropy(logits.float().transpose(1, 2), targets[:, 1:])

    return model, loss, optimizer


def worker(app: str, quick: bool) -> None:
    """Serve commands on stdin, one JSON object per line on stdout."""
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    module, loss_fn, optimizer = (_captioner if app == "captioner" else _recognizer)(quick)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "save":
            torch.save(module.state_dict(), argument)
            reply = {}
        elif command == "load":
            module.load_state_dict(torch.load(argument, weights_only=True))
            reply = {}
        elif command == "loss":
            with torch.no_grad():
                reply = {"loss": float(loss_fn())}
        elif command == "step":
            start = time.perf_counter()
            loss = loss_fn()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            reply = {"seconds": time.perf_counter() - start, "loss": float(loss.detach())}
        else:
            break
        print(json.dumps(reply), flush=True)


# ----------------------------------------------------------------------------- the coordinator


class _Worker:
    def __init__(self, tree: Path, app: str, quick: bool):
        env = {**os.environ, "PYTHONPATH": str(tree)}
        args = [sys.executable, str(Path(__file__).resolve()), "--worker", app] + (["--quick"] if quick else [])
        self.process = subprocess.Popen(args, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ask("")  # waits for "ready"

    def ask(self, command: str) -> dict:
        if command:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"bench_against: a worker ended early (exit code {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(60)


def compare(app: str, revision: str, quick: bool = False, rounds: int = 5) -> dict:
    """Median step seconds of this tree and of ``revision``, and their ratio (see the module docstring)."""
    if rounds < 1:
        raise SystemExit(f"bench_against: --rounds must be at least 1, got {rounds}")
    resolved = subprocess.run(["git", "rev-parse", "--short", revision], cwd=ROOT, capture_output=True, text=True)
    if resolved.returncode:
        raise SystemExit(f"bench_against: {revision!r} is not a revision of this repository")
    with tempfile.TemporaryDirectory(prefix="attend-against-") as folder:
        other_tree = Path(folder) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(other_tree), revision], cwd=ROOT, check=True, capture_output=True
        )
        try:
            ours, theirs = _Worker(ROOT, app, quick), _Worker(other_tree, app, quick)
            weights = Path(folder) / "weights.pt"
            theirs.ask(f"save {weights}")
            ours.ask(f"load {weights}")
            losses = ours.ask("loss")["loss"], theirs.ask("loss")["loss"]
            if abs(losses[0] - losses[1]) > TOLERANCE * abs(losses[1]):
                raise SystemExit(f"bench_against: the two revisions compute different losses on the same batch: {losses}")
            ours.ask("step"), theirs.ask("step")  # warm-up
            times: dict[str, list[float]] = {"this": [], revision: []}
            for _ in range(rounds):  # each turn: an untimed step brings the worker's memory back, then a timed one
                for worker, key in ((ours, "this"), (theirs, revision)):
                    worker.ask("step")
                    times[key].append(worker.ask("step")["seconds"])
            ours.close(), theirs.close()
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other_tree)], cwd=ROOT, capture_output=True)
    this, other = float(np.median(times["this"])), float(np.median(times[revision]))
    return {
        "app": app,
        "against": revision,
        "commit": resolved.stdout.strip(),
        "quick": quick,
        "rounds": rounds,
        "loss_this": losses[0],
        "loss_other": losses[1],
        "step_seconds_this": this,
        "step_seconds_other": other,
        "speedup": other / this,
    }


def report(result: dict) -> str:
    return (
        f"{result['app']} training step against {result['against']} ({result['commit']}), {result['rounds']} steps each, "
        f"taken in turn{' (quick sizes)' if result['quick'] else ''}:\n"
        f"  same loss on the same batch: {result['loss_this']:.6f} (this) and {result['loss_other']:.6f}\n"
        f"  this {result['step_seconds_this']:.3f} s/step, {result['against']} {result['step_seconds_other']:.3f} s/step: "
        f"speedup {result['speedup']:.2f}x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("app", choices=["captioner", "recognizer"])
    parser.add_argument("--against", help="the other revision (a commit, tag or branch)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a quick check")
    parser.add_argument("--rounds", type=int, default=5, help="timed steps of each revision (default 5)")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.app, args.quick)
        return 0
    if not args.against:
        parser.error("--against REV is required")
    result = compare(args.app, args.against, args.quick, args.rounds)
    print(json.dumps(result) if args.json else report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
