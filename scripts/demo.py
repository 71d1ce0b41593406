"""The main job: train both apps on built-in data and show what they learned.

    python scripts/demo.py [--fresh] [--out outputs/demo]

Each stage is skipped when its result is already there, so a second run reuses the prepared
data and trained checkpoints and takes about a minute; ``--fresh`` starts over. Every stage
runs the apps' own command lines, so what the demo shows is what a user gets.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import soundfile
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_page import build_page  # noqa: E402

from shared.training.checkpoints import find_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHOW_IMAGES, SPEECH_FILES, EXPLAIN_IMAGES = 6, 6, 24


def _stage(title: str) -> None:
    print(f"\n==> {title}", flush=True)


def _run(args: list[str]) -> None:
    """Run one app command, its progress streaming to the terminal; stop the demo if it fails."""
    shown = args[2:] if args[:2] == [sys.executable, "-m"] else args[1:] if args[0] == sys.executable else args
    print("   $ " + " ".join(map(str, shown)), flush=True)
    result = subprocess.run(args, cwd=ROOT)
    if result.returncode != 0:
        raise SystemExit(f"demo: the step above failed (exit code {result.returncode})")


def _app(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"{module}.cli", *map(str, args)]


def _json_lines(args: list[str]) -> list[dict]:
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"demo: {' '.join(args[2:])} failed:\n{result.stderr.strip()}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _run_dir(config: str) -> Path:
    """Where a config's runs go: its ``trainer.default_root_dir``."""
    settings = yaml.safe_load((ROOT / config).read_text())
    return ROOT / settings["trainer"]["default_root_dir"]


def _bf16_is_fast() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX-512 BF16 or AMX); elsewhere bf16 autocast
    is emulated and slower than float32."""
    import torch

    # Private helpers of torch.cpu: a version without them counts as no bf16 units, not as an error.
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def _train(module: str, config: str, data_dir: Path, extra: tuple[str, ...] = ()) -> tuple[Path, dict, float]:
    """Fit (unless a finished run exists) and test; returns the run folder, test metrics, fit seconds.

    The run is ``<default_root_dir>/version_N`` (the apps' run layout); a finished one holds
    ``checkpoints/last.ckpt`` and the demo's ``train_seconds.txt``. ``extra`` goes to both commands.
    """
    root = _run_dir(config)
    checkpoint = find_checkpoint(root, "last")
    run = checkpoint.parents[1] if checkpoint is not None else None
    if run is None or not (run / "train_seconds.txt").is_file():
        start = time.perf_counter()
        _run(_app(module, "fit", "--config", config, "--data.data_dir", data_dir, *extra))
        checkpoint = find_checkpoint(root, "last")
        if checkpoint is None:
            raise SystemExit(f"demo: training left no last.ckpt under {root}")
        run = checkpoint.parents[1]
        (run / "train_seconds.txt").write_text(f"{time.perf_counter() - start:.1f}\n")
    else:
        print(f"   reusing {checkpoint.relative_to(ROOT)}")
    if not (run / "test_metrics.json").is_file():
        _run(_app(module, "test", "--config", config, "--data.data_dir", data_dir, "--ckpt_path", checkpoint, *extra))
    if not (run / "test_metrics.json").is_file():
        raise SystemExit(f"demo: testing wrote no test_metrics.json in {run}")
    return run, json.loads((run / "test_metrics.json").read_text()), float((run / "train_seconds.txt").read_text())


def _curves(run: Path, main_metric: str) -> dict[str, list[tuple[int, float]]]:
    """Training loss and the main validation metric against steps, from the run's metrics.csv."""
    wanted = {"train loss": "train/loss", main_metric: f"val/{main_metric}"}
    series: dict[str, list[tuple[int, float]]] = {name: [] for name in wanted}
    with (run / "metrics.csv").open() as f:
        for row in csv.DictReader(f):
            for name, column in wanted.items():
                if row.get(column):
                    series[name].append((int(row.get("step") or 0), float(row[column])))
    return {name: sorted(points) for name, points in series.items() if points}


def _explain(checkpoint: Path, images: list[Path], folder: Path) -> dict:
    """``show-attend explain`` on test images: the summary, the three images where attention and
    occlusion disagree most and the one where they agree most (for the page)."""
    _run(_app("show_attend", "explain", "--ckpt", checkpoint, *images, "--out", folder))
    words = [json.loads(line) for line in (folder / "explain.jsonl").read_text().splitlines()]
    per_image: dict[str, list[dict]] = {}
    for word in words:
        per_image.setdefault(word["image"], []).append(word)

    def mean(values):
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else 0.0

    examples = []
    for image, ws in per_image.items():
        examples.append({"png": f"explain/{Path(image).stem}.png", "caption": " ".join(w["word"] for w in ws),
                         "rank_correlation": mean(w["rank_correlation"] for w in ws), "words": len(ws),
                         "in_top3": sum(w["attention_peak_in_top_occlusion"] for w in ws)})
    examples.sort(key=lambda e: e["rank_correlation"])
    summary = {
        "images": len(per_image), "words": len(words),
        "peak_in_top3": mean(w["attention_peak_in_top_occlusion"] for w in words),
        "peaks_differ": mean(w["attention_peak"] != w["occlusion_peak"] for w in words),
        "rank_correlation": mean(w["rank_correlation"] for w in words),
        "drop_at_attention_peak": mean(w["drop_at_attention_peak"] for w in words),
        "drop_at_random": mean(w["drop_at_random"] for w in words),
    }
    return {"summary": summary, "disagree": examples[:3], "agree": examples[-1:]}


def _bottleneck() -> dict:
    """The bottleneck plots, if ``scripts/bottleneck.py`` has been run (full run first), copied beside the page."""
    command = "python scripts/bottleneck.py --quick"
    for kind in ("full", "quick"):
        folder = ROOT / "outputs" / "bottleneck" / kind
        plots = sorted(folder.glob("*.png")) if (folder / "results.json").is_file() else []
        if plots:
            return {"command": command.replace(" --quick", "") if kind == "full" else command, "plots": [str(p) for p in plots]}
    return {"command": command, "plots": []}


def captioner(out: Path, data_root: Path) -> tuple[dict, list[dict], dict, dict, Path]:
    from shared.evaluation.plots import save_curves

    data_dir, config = data_root / "shapes", "configs/show_attend/demo.yaml"
    _stage("Captioner 1/4: built-in shapes data")
    if not (data_dir / "dataset_shapes.json").is_file():
        _run(_app("show_attend", "prepare", "shapes", "--out", data_dir))
    else:
        print(f"   reusing {data_dir.relative_to(ROOT)}")
    # The captioner's convolutions and products take shorter steps under bf16 autocast where the CPU
    # has bf16 units; the recognizer's LSTMs do not (docs/BENCHMARKS.md), so it stays in float32.
    precision = ("--trainer.precision", "bf16-mixed") if _bf16_is_fast() else ()
    _stage("Captioner 2/4: train soft attention (configs/show_attend/demo.yaml), then test with beam search")
    run, test, seconds = _train("show_attend", config, data_dir, precision)
    checkpoint = run / "checkpoints" / "last.ckpt"

    _stage("Captioner 3/4: caption test images with attention overlays")
    dataset = json.loads((data_dir / "dataset_shapes.json").read_text())
    tests = [im for im in dataset["images"] if im["split"] == "test"][:SHOW_IMAGES]
    (out / "images").mkdir(parents=True, exist_ok=True)
    images = [shutil.copy(data_dir / "images" / im["filename"], out / "images" / im["filename"]) for im in tests]
    lines = _json_lines(_app("show_attend", "caption", "--ckpt", checkpoint, *images, "--overlay-dir", out / "overlays", "--json"))
    captions = []
    for im, line in zip(tests, lines):
        print(f"   {im['filename']}: {line['caption']}")
        captions.append({
            "image": f"images/{im['filename']}",
            "caption": line["caption"],
            "references": [sentence["raw"] for sentence in im["sentences"]],
            "overlay": str(Path(line["overlay"]).resolve().relative_to(out.resolve())) if line.get("overlay") else None,
        })
    curve = out / "curves" / "captioner.png"
    save_curves(_curves(run, "exact_match"), curve, "captioner (shapes, soft attention)")
    _stage("Captioner 4/4: attention against occlusion (show-attend explain)")
    explained = [data_dir / "images" / im["filename"] for im in dataset["images"] if im["split"] == "test"][:EXPLAIN_IMAGES]
    explain = _explain(checkpoint, explained, out / "explain")
    metrics = {
        "exact_match": test.get("exact_match"),
        "bleu4": test.get("bleu4"),
        "cider": test.get("cider"),
        "pointing_accuracy": test.get("pointing_accuracy"),
        "train_seconds": seconds,
    }
    return metrics, captions, {"Captioner": "curves/captioner.png"}, explain, checkpoint


def recognizer(out: Path, data_root: Path) -> tuple[dict, list[dict], dict, Path]:
    from shared.evaluation.plots import save_curves
    from speech_attend.corpora import read_librispeech

    data_dir, config = data_root / "synth", "configs/speech_attend/demo.yaml"
    _stage("Recognizer 1/3: built-in synthesised speech (espeak-ng)")
    if not (data_dir / "test").is_dir():
        _run(_app("speech_attend", "prepare", "synth", "--out", data_dir))
    else:
        print(f"   reusing {data_dir.relative_to(ROOT)}")
    _stage("Recognizer 2/3: train LAS (configs/speech_attend/demo.yaml), then test on held-out voices")
    run, test, seconds = _train("speech_attend", config, data_dir)
    checkpoint = run / "checkpoints" / "last.ckpt"

    _stage("Recognizer 3/3: transcribe test files with alignment plots")
    utterances = read_librispeech(data_dir, subsets=["test"])[:SPEECH_FILES]
    (out / "audio").mkdir(parents=True, exist_ok=True)
    audio_files = []
    for utt in utterances:  # WAV plays in every browser
        samples, rate = soundfile.read(utt.audio_path)
        target = out / "audio" / (Path(utt.audio_path).stem + ".wav")
        soundfile.write(target, samples, rate)
        audio_files.append(target)
    lines = _json_lines(_app("speech_attend", "transcribe", "--ckpt", checkpoint, *audio_files,
                             "--alignment-dir", out / "alignments", "--json"))
    transcripts = []
    for utt, path, line in zip(utterances, audio_files, lines):
        print(f"   {path.name}: {line['text']}")
        alignment = out / "alignments" / (path.stem + ".png")
        transcripts.append({
            "audio": f"audio/{path.name}",
            "reference": utt.text.lower(),
            "text": line["text"],
            "alignment": f"alignments/{alignment.name}" if alignment.is_file() else None,
            "duration_s": line.get("duration_s", 0.0),
        })
    save_curves(_curves(run, "cer"), out / "curves" / "recognizer.png", "recognizer (synthesised speech)")
    metrics = {"wer": test.get("wer"), "cer": test.get("cer"), "train_seconds": seconds}
    return metrics, transcripts, {"Recognizer": "curves/recognizer.png"}, checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "demo", help="where results go")
    parser.add_argument("--data", type=Path, default=ROOT / "data", help="where built-in data is generated")
    parser.add_argument("--fresh", action="store_true", help="delete earlier results and data, start over")
    args = parser.parse_args(argv)
    out, data_root = args.out.resolve(), args.data.resolve()
    if args.fresh:
        runs = [_run_dir(f"configs/{app}/demo.yaml") for app in ("show_attend", "speech_attend")]
        for path in (out, data_root / "shapes", data_root / "synth", *runs):
            shutil.rmtree(path, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    caption_metrics, captions, caption_curves, explain, caption_model = captioner(out, data_root)
    speech_metrics, transcripts, speech_curves, speech_model = recognizer(out, data_root)
    metrics = {"captioner": caption_metrics, "recognizer": speech_metrics}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    _stage("Failure modes: identical objects, a longer scene, a dropped mask (scripts/failure_modes.py)")
    _run([sys.executable, str(ROOT / "scripts" / "failure_modes.py"), "--captioner", caption_model, "--recognizer", speech_model,
          "--data", data_root / "synth", "--out", out])
    failures = json.loads((out / "failure_modes.json").read_text())
    bottleneck = _bottleneck()
    for i, plot in enumerate(bottleneck["plots"]):
        bottleneck["plots"][i] = str(Path(shutil.copy(plot, out / "curves" / f"bottleneck_{Path(plot).name}")).relative_to(out))
    page = build_page(out, metrics, captions, transcripts, {**caption_curves, **speech_curves}, explain, bottleneck, failures)

    _stage(f"Done in {time.perf_counter() - start:.0f} s")
    print(f"   open {page}")
    c, r = caption_metrics, speech_metrics
    print(f"   captioner : exact match {c['exact_match']:.3f}  BLEU-4 {c['bleu4']:.3f}  CIDEr {c['cider']:.3f}  "
          f"pointing {c['pointing_accuracy']:.3f}  (trained {c['train_seconds']:.0f} s)")
    print(f"   recognizer: WER {r['wer']:.3f}  CER {r['cer']:.3f}  (trained {r['train_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
