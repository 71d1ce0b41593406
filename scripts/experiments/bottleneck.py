"""What attention buys: each app with attention against the same app reading one fixed vector.

    python -m scripts.experiments.bottleneck [--quick] [--out outputs/bottleneck] [--apps captioner,recognizer] [--data data]

A decoder without attention (``attention: none``: every step reads the mean of the encoder's
vectors, as Show and Tell reads one image vector) must squeeze the whole input into that
vector; attention keeps every position and reads what each step needs. Both models of an app
are trained with the same budget (config, steps, data, seed) and differ in that one setting:

* captioner (``configs/show_attend/demo.yaml``, built-in shapes of 1-4 objects): exact match
  and object-level F1 on new scenes of 1 to 6 objects, by number of objects: scenes of 5 and 6
  objects are longer than any seen in training;
* recognizer (``configs/speech_attend/demo.yaml``, the built-in spoken corpus): CER by
  utterance length (bins of 1 s) on the test split, and on test utterances joined into files
  2 and 3 times as long as the longest training utterance (decoded whole, not cut at pauses).

Writes ``OUT/results.json``, ``OUT/captioner.png`` and ``OUT/recognizer.png`` (metric against
length, a line per model), and prints the tables. Trained models are reused by a second run.
``--quick`` trains short (about 10 minutes on 2 CPU cores, all four models); the full run uses
the demo's budgets.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from shared.evaluation.plots import save_lines
from shared.training.checkpoints import find_checkpoint
from show_attend.builtin.shapes import COLOURS, SHAPES, generate_scene
from show_attend.evaluate.metrics import exact_match
from show_attend.train.pointing import ATTRIBUTE_WORDS
from speech_attend.evaluate.metrics import char_error_rate

ROOT = Path(__file__).resolve().parents[2]

MODELS = {"attention": [], "fixed vector": ["none"]}  # label -> the attention override (none for the fixed vector)


@dataclass
class Budget:
    caption_steps: int  # training steps of each captioner
    speech_steps: int  # training steps of each recognizer
    scenes_per_count: int  # test scenes with each number of objects, 1 to 6
    joined_files: int  # test files per length, 2x and 3x the longest training utterance
    beam_size: int


QUICK = Budget(caption_steps=400, speech_steps=300, scenes_per_count=25, joined_files=8, beam_size=3)
# The measured table's budgets: the demo's captioner steps, and its recognizer's before they went to 1,750.
FULL = Budget(caption_steps=1200, speech_steps=2000, scenes_per_count=100, joined_files=30, beam_size=5)


def _run(args: list[str]) -> None:
    """``python -m APP.cli COMMAND ...``, run in this process: the apps start up once, not per step."""
    module, *argv = map(str, args)
    print("   $ " + " ".join(argv), flush=True)
    code = importlib.import_module(module).main(argv)
    if code != 0:
        raise SystemExit(f"bottleneck: the step above failed (exit code {code})")


def _train(app: str, config: Path, data: Path, root: Path, steps: int, extra: list[str]) -> Path:
    """Fit once (a finished run is reused) without validation; the last checkpoint."""
    checkpoint = find_checkpoint(root, "last")
    if checkpoint is not None and (checkpoint.parents[1] / "train_seconds.txt").is_file():
        return checkpoint
    start = time.perf_counter()
    _run(
        [
            app + ".cli",
            "fit",
            "--config",
            config,
            "--data.data_dir",
            data,
            "--trainer.default_root_dir",
            root,
            "--trainer.max_steps",
            steps,
            "--trainer.check_val_every_n_epoch",
            10_000,
            "--trainer.enable_progress_bar",
            "false",
            *extra,
        ]
    )
    checkpoint = find_checkpoint(root, "last")
    (checkpoint.parents[1] / "train_seconds.txt").write_text(f"{time.perf_counter() - start:.1f}\n")
    return checkpoint


# ----------------------------------------------------------------------------- captioner


def caption_objects(tokens: list[str]) -> list[dict[str, str]]:
    """The objects a caption names: each run of size/colour/shape words, as ``{attribute: word}``."""
    objects, current = [], {}
    for token in [*tokens, ""]:
        if token in ATTRIBUTE_WORDS:
            kind = "shape" if token in SHAPES else "colour" if token in COLOURS else "size"
            current[kind] = token
        elif current:
            objects.append(current)
            current = {}
    return objects


def object_f1(named: list[dict[str, str]], objects: list[dict[str, str]]) -> float:
    """F1 of the objects a caption names against a scene's: a named object matches a real one of
    its colour and shape (and size, when it says one), each real object matched once."""
    left = list(objects)
    hits = 0
    for obj in named:
        match = next((o for o in left if all(o[k] == v for k, v in obj.items())), None)
        if match is not None and {"colour", "shape"} <= obj.keys():
            left.remove(match)
            hits += 1
    return 2 * hits / (len(named) + len(objects)) if named or objects else 1.0


def captioner(out: Path, budget: Budget, data_root: Path) -> dict:
    from show_attend.data.images import image_transform
    from show_attend.infer.caption import load_captioner

    data = data_root / "shapes"
    if not (data / "dataset_shapes.json").is_file():
        _run(["show_attend.cli", "prepare", "shapes", "--out", data, "--quiet"])
    # New scenes of 1 to 6 objects (training saw 1 to 4), the same number of each, fixed by a seed.
    scenes: dict[int, list] = {n: [] for n in range(1, 7)}
    rng = np.random.default_rng(2026)
    while any(len(v) < budget.scenes_per_count for v in scenes.values()):
        scene = generate_scene(rng, image_size=128, max_objects=6)
        if len(scenes[len(scene.objects)]) < budget.scenes_per_count:
            scenes[len(scene.objects)].append(scene)
    results = {}
    for label, attention in MODELS.items():
        extra = ["--model.decoder.attention", *attention] if attention else []
        checkpoint = _train(
            "show_attend",
            ROOT / "configs/show_attend/demo.yaml",
            data,
            out / "runs" / f"captioner_{attention[0] if attention else 'soft'}",
            budget.caption_steps,
            extra,
        )
        model = load_captioner(checkpoint).eval()
        transform = image_transform(model.config.image_size)
        by_count = {}
        for count, group in scenes.items():
            images = torch.stack([transform(scene.image) for scene in group])
            with torch.no_grad():
                hyps = model.search(model.encode(images), beam_size=budget.beam_size)
            captions = [model.vocabulary.decode(h.tokens) for h in hyps]
            hypotheses = {i: " ".join(c) for i, c in enumerate(captions)}
            references = {i: [" ".join(words) for words in scene.captions] for i, scene in enumerate(group)}
            truths = [[{"size": o.size, "colour": o.colour, "shape": o.shape} for o in scene.objects] for scene in group]
            named = [caption_objects(c) for c in captions]
            by_count[count] = {
                "exact_match": exact_match(hypotheses, references),
                "object_f1": float(np.mean([object_f1(n, t) for n, t in zip(named, truths)])),
                "right_count": float(np.mean([len(n) == len(t) for n, t in zip(named, truths)])),
            }
        results[label] = by_count
    for metric in ("exact_match", "object_f1"):
        save_lines(
            {label: [(n, r[metric]) for n, r in by_count.items()] for label, by_count in results.items()},
            out / f"captioner_{metric}.png",
            "objects in the scene (training: 1-4)",
            metric.replace("_", " "),
            "captioner: attention against one fixed vector",
        )
    return results


# ----------------------------------------------------------------------------- recognizer


def _joined(utterances: list, waves: dict, target_seconds: float, files: int, seed: int) -> list[tuple[torch.Tensor, str]]:
    """``files`` files of test utterances joined by 0.3 s of silence until ``target_seconds`` long."""
    rng = np.random.default_rng(seed)
    pause = torch.zeros(4800)
    joined = []
    for _ in range(files):
        parts, texts, seconds = [], [], 0.0
        while seconds < target_seconds:
            utterance = utterances[int(rng.integers(len(utterances)))]
            parts += [waves[utterance.utt_id], pause]
            texts.append(utterance.text.lower())
            seconds += (waves[utterance.utt_id].numel() + pause.numel()) / 16000
        joined.append((torch.cat(parts[:-1]), " ".join(texts)))
    return joined


def recognizer(out: Path, budget: Budget, data_root: Path) -> dict:
    from speech_attend.data.audio import audio_duration, load_audio
    from speech_attend.data.dataset import pad_waves
    from speech_attend.data.readers import read_librispeech
    from speech_attend.data.text import normalize_text
    from speech_attend.infer.transcribe import load_recognizer

    data = data_root / "synth"
    if not (data / "synth.json").is_file():
        _run(["speech_attend.cli", "prepare", "synth", "--out", data])
    test = read_librispeech(data, subsets=["test"])
    waves = {u.utt_id: load_audio(u.audio_path) for u in test}
    longest_training = max(audio_duration(u.audio_path) for u in read_librispeech(data, subsets=["train"]))
    items = [(waves[u.utt_id], normalize_text(u.text)) for u in test]
    for factor in (2, 3):
        items += [(w, normalize_text(t)) for w, t in _joined(test, waves, factor * longest_training, budget.joined_files, factor)]
    results = {}
    for label, attention in MODELS.items():
        extra = ["--model.las.attention", *attention, "--model.guided_attention", "0"] if attention else []
        checkpoint = _train(
            "speech_attend",
            ROOT / "configs/speech_attend/demo.yaml",
            data,
            out / "runs" / f"recognizer_{attention[0] if attention else 'location'}",
            budget.speech_steps,
            extra,
        )
        model = load_recognizer(checkpoint)
        vocabulary = model.vocabulary
        texts = []
        order = sorted(range(len(items)), key=lambda i: -items[i][0].numel())  # similar lengths decode together
        for start in range(0, len(order), 16):
            batch = [items[i][0] for i in order[start : start + 16]]
            waveforms, lengths = pad_waves(batch)
            hyps, _ = model.decode(waveforms, lengths, beam_size=budget.beam_size)
            texts += [(i, "".join(vocabulary.decode(h.tokens))) for i, h in zip(order[start : start + 16], hyps)]
        by_bin: dict[int, list[tuple[str, str]]] = {}
        for i, text in texts:
            by_bin.setdefault(int(items[i][0].numel() / 16000), []).append((items[i][1], text))
        results[label] = {
            second: {"cer": char_error_rate(*map(list, zip(*pairs))), "utterances": len(pairs)}
            for second, pairs in sorted(by_bin.items())
        }
    results["longest_training_seconds"] = longest_training
    save_lines(
        {label: [(s + 0.5, r["cer"]) for s, r in results[label].items()] for label in MODELS},
        out / "recognizer.png",
        f"utterance length, s (1 s bins; training's longest: {longest_training:.1f} s)",
        "CER",
        "recognizer: attention against one fixed vector",
    )
    return results


def _tables(results: dict) -> str:
    lines = []
    if "captioner" in results:
        lines += [
            "| objects | " + " | ".join(f"{m} exact / F1 / right count" for m in MODELS) + " |",
            "|---|" + "---|" * len(MODELS),
        ]
        for count in range(1, 7):
            cells = [results["captioner"][m][count] for m in MODELS]
            lines.append(
                f"| {count} | "
                + " | ".join(f"{c['exact_match']:.2f} / {c['object_f1']:.2f} / {c['right_count']:.2f}" for c in cells)
                + " |"
            )
        lines.append("")
    if "recognizer" in results:
        speech = results["recognizer"]
        seconds = sorted({s for m in MODELS for s in speech[m]})
        lines += [
            "| length (s) | utterances | " + " | ".join(f"{m} CER" for m in MODELS) + " |",
            "|---|---|" + "---|" * len(MODELS),
        ]
        for s in seconds:
            cells = [speech[m].get(s) for m in MODELS]
            count = next(c["utterances"] for c in cells if c)
            lines.append(f"| {s}-{s + 1} | {count} | " + " | ".join(f"{c['cer']:.3f}" if c else "-" for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short training: about 10 minutes on 2 CPU cores")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bottleneck", help="where models, plots and results go")
    parser.add_argument("--apps", default="captioner,recognizer", help="comma-separated: captioner, recognizer")
    parser.add_argument("--data", type=Path, default=ROOT / "data", help="holds shapes/ and synth/ (made if missing)")
    parser.add_argument("--steps", type=int, default=None, help="training steps of every model (default: the budget's)")
    parser.add_argument("--per-length", type=int, default=None, help="test scenes per object count and joined files per length")
    args = parser.parse_args(argv)
    budget = QUICK if args.quick else FULL
    if args.steps is not None:
        budget = replace(budget, caption_steps=args.steps, speech_steps=args.steps)
    if args.per_length is not None:
        budget = replace(budget, scenes_per_count=args.per_length, joined_files=args.per_length)
    apps = [a.strip() for a in args.apps.split(",") if a.strip()]
    if not apps or set(apps) - {"captioner", "recognizer"}:
        parser.error(f"--apps takes captioner and/or recognizer, got {args.apps!r}")
    out = (args.out / ("quick" if args.quick else "full")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results: dict = {"budget": asdict(budget)}
    if "captioner" in apps:
        results["captioner"] = captioner(out, budget, args.data.resolve())
    if "recognizer" in apps:
        results["recognizer"] = recognizer(out, budget, args.data.resolve())
    results["seconds"] = round(time.perf_counter() - start, 1)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(_tables(results))
    print(f"done in {results['seconds']:.0f} s; plots and results.json in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
