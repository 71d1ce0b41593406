"""The main job: train both apps on built-in data and show what they learned.

    python -m scripts.demo.run [--fresh] [--out outputs/demo] [--minutes 10] [--started UNIX_TIME]

Each stage is skipped when its result is already there, so a second run reuses the prepared
data and trained checkpoints and takes about a minute; ``--fresh`` starts over. Every stage
runs the apps' own command lines, so what the demo shows is what a user gets.

The two apps train at the same time, in two lanes (:mod:`scripts.demo.lanes`), each one process
on half of the CPU cores: neither training gains much from a second core (their matrix products
are small: one decoder step per word or character; docs/BENCHMARKS.md), and the captioner's
tests and examples run while the recognizer is still training. Once one lane is done, the
other's training takes every core from its next step (through a threads file that its training
reads, :class:`~shared.training.threads.ThreadsFromFile`). Their output goes to ``<out>/logs/``; every
half minute the terminal shows both trainings' steps, read from their runs' ``metrics.csv``.

The whole demo keeps to ``--minutes``, counted from ``--started`` (``make demo`` passes the time it
began, so installing counts too): each training is given what is left once the stages after it are
set aside (``--trainer.max_time``). A machine fast enough finishes the configs' steps; a slower one
stops its trainings early, and the demo says at which step.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import soundfile
import yaml

from scripts.demo.lanes import Lane
from scripts.demo.page import build_page
from shared.training.checkpoints import find_checkpoint
from shared.training.schedule import max_time

ROOT = Path(__file__).resolve().parents[2]
SHOW_IMAGES, SPEECH_FILES, EXPLAIN_IMAGES = 6, 6, 24
CAPTIONER_CONFIG, RECOGNIZER_CONFIG = "configs/show_attend/demo.yaml", "configs/speech_attend/demo.yaml"


_STARTED = time.perf_counter()
_PRINTING = threading.Lock()
PROGRESS_EVERY_S = 30
# Seconds set aside after the trainings: the recognizer's test, transcriptions, failure modes and
# page, and each training command's start-up, which max_time does not count; and, within the
# captioner's lane, its test, captions and attention maps after its fit.
AFTER_TRAINING_S, CAPTIONER_AFTER_FIT_S = 45, 60
MIN_TRAINING_S = 60  # a machine already past its budget still trains this long, and says it runs over


def _say(text: str) -> None:
    with _PRINTING:
        print(text, flush=True)


def _stage(title: str) -> None:
    """A stage's heading, with the time since the demo started (where the minutes go)."""
    _say(f"\n==> [{time.perf_counter() - _STARTED:4.0f} s] {title}")


def _display(path: Path) -> str:
    """A path as short as it can be said: relative to the working folder where it lies under it."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def _shown(args: list) -> str:
    shown = args[2:] if args[:2] == [sys.executable, "-m"] else args[1:] if args[0] == sys.executable else args
    return " ".join(map(str, shown))


def _run(args: list, lane: Lane | None = None) -> None:
    """Run one app command, its progress streaming to the terminal (or to the lane's log); stop
    the demo if it fails."""
    if lane is None:
        _say("   $ " + _shown(args))
        result = subprocess.run(args, cwd=ROOT)
        if result.returncode != 0:
            raise SystemExit(f"demo: the step above failed (exit code {result.returncode})")
        return
    lane.begin(str(args[3]) if len(args) > 3 else "running")
    with lane.log.open("a") as log:
        log.write(f"$ {_shown(args)}\n")
        log.flush()
        lane.process = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=lane.env)
        code = lane.process.wait()
    lane.command = "done"
    if code != 0 and lane.stopped:
        raise SystemExit(f"demo: the {lane.name} was stopped")
    if code != 0:
        tail = re.split(r"[\r\n]+", lane.log.read_text(errors="replace").strip())[-12:]
        _say("\n".join(f"   | {line}" for line in tail))
        raise SystemExit(f"demo: the {lane.name}'s '{_shown(args)}' failed (exit code {code}); whole log: {lane.log}")


def _app(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"{module}.cli", *map(str, args)]


def _json_lines(args: list, lane: Lane | None = None) -> list[dict]:
    if lane is not None:
        lane.begin(str(args[3]))
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=lane.env if lane else None)
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


def _fit(module: str, config: str, data_dir: Path, extra: tuple[str, ...] = (), lane: Lane | None = None) -> tuple[Path, float]:
    """Fit, unless a finished run exists; returns the run folder and the fit's seconds.

    The run is ``<default_root_dir>/version_N`` (the apps' run layout); a finished one holds
    ``checkpoints/last.ckpt`` and the demo's ``train_seconds.txt``. ``extra`` goes to the command.
    """
    root = _run_dir(config)
    checkpoint = find_checkpoint(root, "last")
    run = checkpoint.parents[1] if checkpoint is not None else None
    if run is None or not (run / "train_seconds.txt").is_file():
        start = time.perf_counter()
        _run(_app(module, "fit", "--config", config, "--data.data_dir", data_dir, *extra), lane)
        checkpoint = find_checkpoint(root, "last")
        if checkpoint is None:
            raise SystemExit(f"demo: training left no last.ckpt under {root}")
        run = checkpoint.parents[1]
        (run / "train_seconds.txt").write_text(f"{time.perf_counter() - start:.1f}\n")
    else:
        _say(f"   reusing {checkpoint.relative_to(ROOT)}")
    return run, float((run / "train_seconds.txt").read_text())


def training_limit(deadline: float, now: float, after: float) -> tuple[float, bool]:
    """Seconds a training may take so that the stages ``after`` it still end by ``deadline``, and
    whether that is the floor ``MIN_TRAINING_S`` (the demo will run over its minutes)."""
    left = deadline - now - after
    return max(left, MIN_TRAINING_S), left < MIN_TRAINING_S


def reached(run: Path, config: str) -> dict:
    """The steps a finished training made (its last checkpoint's), of its config's ``max_steps``."""
    import torch

    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True, mmap=True)
    return {"steps": int(saved["global_step"]), "max_steps": _max_steps(config)}


def _test(module: str, config: str, data_dir: Path, run: Path, extra: tuple[str, ...] = (), lane: Lane | None = None) -> dict:
    """Test a fitted run (unless tested already) with the same ``extra`` settings; its test metrics."""
    if not (run / "test_metrics.json").is_file():
        checkpoint = run / "checkpoints" / "last.ckpt"
        _run(_app(module, "test", "--config", config, "--data.data_dir", data_dir, "--ckpt_path", checkpoint, *extra), lane)
    if not (run / "test_metrics.json").is_file():
        raise SystemExit(f"demo: testing wrote no test_metrics.json in {run}")
    return json.loads((run / "test_metrics.json").read_text())


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


def _explain(checkpoint: Path, images: list[Path], folder: Path, lane: Lane | None = None) -> dict:
    """``show-attend explain`` on test images: the summary, the three images where attention and
    occlusion disagree most and the one where they agree most (for the page)."""
    _run(_app("show_attend", "explain", "--ckpt", checkpoint, *images, "--out", folder), lane)
    words = [json.loads(line) for line in (folder / "explain.jsonl").read_text().splitlines()]
    per_image: dict[str, list[dict]] = {}
    for word in words:
        per_image.setdefault(word["image"], []).append(word)

    def mean(values):
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else 0.0

    examples = []
    for image, ws in per_image.items():
        examples.append(
            {
                "png": f"explain/{Path(image).stem}.png",
                "caption": " ".join(w["word"] for w in ws),
                "rank_correlation": mean(w["rank_correlation"] for w in ws),
                "words": len(ws),
                "in_top3": sum(w["attention_peak_in_top_occlusion"] for w in ws),
            }
        )
    examples.sort(key=lambda e: e["rank_correlation"])
    summary = {
        "images": len(per_image),
        "words": len(words),
        "peak_in_top3": mean(w["attention_peak_in_top_occlusion"] for w in words),
        "peaks_differ": mean(w["attention_peak"] != w["occlusion_peak"] for w in words),
        "rank_correlation": mean(w["rank_correlation"] for w in words),
        "drop_at_attention_peak": mean(w["drop_at_attention_peak"] for w in words),
        "drop_at_random": mean(w["drop_at_random"] for w in words),
    }
    return {"summary": summary, "disagree": examples[:3], "agree": examples[-1:]}


def _bottleneck() -> dict:
    """The bottleneck plots, if :mod:`scripts.experiments.bottleneck` has been run (full run first), copied beside the page."""
    command = "python -m scripts.experiments.bottleneck --quick"
    for kind in ("full", "quick"):
        folder = ROOT / "outputs" / "bottleneck" / kind
        plots = sorted(folder.glob("*.png")) if (folder / "results.json").is_file() else []
        if plots:
            return {"command": command.replace(" --quick", "") if kind == "full" else command, "plots": [str(p) for p in plots]}
    return {"command": command, "plots": []}


def _max_steps(config: str) -> int:
    return int(yaml.safe_load((ROOT / config).read_text())["trainer"]["max_steps"])


def prepare_speech(data_dir: Path) -> None:
    """The recognizer's built-in corpus, made once (on all cores: the recognizer's training waits for it)."""
    if not (data_dir / "test").is_dir():
        _run(_app("speech_attend", "prepare", "synth", "--out", data_dir))
    else:
        _say(f"   reusing {_display(data_dir)}")


def captioner(out: Path, data_dir: Path, lane: Lane | None = None, limit: tuple[str, ...] = ()) -> dict:
    """Make the shapes (unless made), train and test the captioner, caption test images with
    overlays, explain its attention."""
    from shared.evaluation.plots import save_curves

    config = CAPTIONER_CONFIG
    if not (data_dir / "dataset_shapes.json").is_file():  # one process: it fits in the lane's share
        _run(_app("show_attend", "prepare", "shapes", "--out", data_dir), lane)
    # The captioner's convolutions and products take shorter steps under bf16 autocast where the CPU
    # has bf16 units; the recognizer's LSTMs do not (docs/BENCHMARKS.md), so it stays in float32.
    precision = ("--trainer.precision", "bf16-mixed") if _bf16_is_fast() else ()
    follow = lane.fit_options() if lane is not None else ()  # the recognizer's cores, should it be done first
    run, seconds = _fit("show_attend", config, data_dir, (*precision, *follow, *limit), lane)
    test = _test("show_attend", config, data_dir, run, precision, lane)
    checkpoint = run / "checkpoints" / "last.ckpt"

    dataset = json.loads((data_dir / "dataset_shapes.json").read_text())
    tests = [im for im in dataset["images"] if im["split"] == "test"][:SHOW_IMAGES]
    (out / "images").mkdir(parents=True, exist_ok=True)
    images = [shutil.copy(data_dir / "images" / im["filename"], out / "images" / im["filename"]) for im in tests]
    lines = _json_lines(
        _app("show_attend", "caption", "--ckpt", checkpoint, *images, "--overlay-dir", out / "overlays", "--json"), lane
    )
    captions = []
    for im, line in zip(tests, lines):
        captions.append(
            {
                "image": f"images/{im['filename']}",
                "caption": line["caption"],
                "references": [sentence["raw"] for sentence in im["sentences"]],
                "overlay": str(Path(line["overlay"]).resolve().relative_to(out.resolve())) if line.get("overlay") else None,
            }
        )
    save_curves(_curves(run, "exact_match"), out / "curves" / "captioner.png", "captioner (shapes, soft attention)")
    explained = [data_dir / "images" / im["filename"] for im in dataset["images"] if im["split"] == "test"][:EXPLAIN_IMAGES]
    explain = _explain(checkpoint, explained, out / "explain", lane)
    metrics = {
        "exact_match": test.get("exact_match"),
        "bleu4": test.get("bleu4"),
        "cider": test.get("cider"),
        "pointing_accuracy": test.get("pointing_accuracy"),
        "train_seconds": seconds,
        **reached(run, config),
    }
    return {
        "metrics": metrics,
        "captions": captions,
        "curves": {"Captioner": "curves/captioner.png"},
        "explain": explain,
        "checkpoint": checkpoint,
    }


def recognizer(out: Path, data_dir: Path, run: Path, seconds: float) -> dict:
    """Test the trained recognizer on held-out voices and transcribe test files with alignment plots."""
    from shared.evaluation.plots import save_curves
    from speech_attend.data.readers import read_librispeech

    test = _test("speech_attend", RECOGNIZER_CONFIG, data_dir, run)
    checkpoint = run / "checkpoints" / "last.ckpt"
    utterances = read_librispeech(data_dir, subsets=["test"])[:SPEECH_FILES]
    (out / "audio").mkdir(parents=True, exist_ok=True)
    audio_files = []
    for utt in utterances:  # WAV plays in every browser
        samples, rate = soundfile.read(utt.audio_path)
        target = out / "audio" / (Path(utt.audio_path).stem + ".wav")
        soundfile.write(target, samples, rate)
        audio_files.append(target)
    lines = _json_lines(
        _app("speech_attend", "transcribe", "--ckpt", checkpoint, *audio_files, "--alignment-dir", out / "alignments", "--json")
    )
    transcripts = []
    for utt, path, line in zip(utterances, audio_files, lines):
        _say(f"   {path.name}: {line['text']}")
        alignment = out / "alignments" / (path.stem + ".png")
        transcripts.append(
            {
                "audio": f"audio/{path.name}",
                "reference": utt.text.lower(),
                "text": line["text"],
                "alignment": f"alignments/{alignment.name}" if alignment.is_file() else None,
                "duration_s": line.get("duration_s", 0.0),
            }
        )
    save_curves(_curves(run, "cer"), out / "curves" / "recognizer.png", "recognizer (synthesised speech)")
    metrics = {"wer": test.get("wer"), "cer": test.get("cer"), "train_seconds": seconds, **reached(run, RECOGNIZER_CONFIG)}
    return {
        "metrics": metrics,
        "transcripts": transcripts,
        "curves": {"Recognizer": "curves/recognizer.png"},
        "checkpoint": checkpoint,
    }


def train_both(out: Path, data_root: Path, deadline: float) -> tuple[dict, tuple[Path, float]]:
    """The captioner (fit, test, examples) and the recognizer's fit at the same time, each on half
    the cores, their output in ``<out>/logs``; a progress line for both every half minute. The
    lane done first hands its cores to the other. Both fits end in time for the stages after
    them to end by ``deadline`` (seconds since the epoch)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
    threads = max(1, cores // 2)
    lanes = [
        Lane("captioner", out / "logs" / "captioner.log", threads, _max_steps(CAPTIONER_CONFIG), _run_dir(CAPTIONER_CONFIG)),
        Lane("recognizer", out / "logs" / "recognizer.log", threads, _max_steps(RECOGNIZER_CONFIG), _run_dir(RECOGNIZER_CONFIG)),
    ]
    _say(
        f"   {threads} thread(s) each, all {cores} to the one still training once the other is done; "
        f"their output: {_display(lanes[0].log)}, {_display(lanes[1].log)}"
    )
    speech_seconds, over = training_limit(deadline, time.time(), AFTER_TRAINING_S)
    caption_seconds = training_limit(deadline, time.time(), AFTER_TRAINING_S + CAPTIONER_AFTER_FIT_S)[0]
    _say(
        f"   time for training: the recognizer {speech_seconds:.0f} s, the captioner {caption_seconds:.0f} s"
        + (" (the least the demo trains: it will run over its minutes)" if over else "")
    )
    speech_options = (*lanes[1].fit_options(), "--trainer.max_time", max_time(speech_seconds))
    with ThreadPoolExecutor(2) as pool:
        jobs: list[Future] = [
            pool.submit(captioner, out, data_root / "shapes", lanes[0], ("--trainer.max_time", max_time(caption_seconds))),
            pool.submit(_fit, "speech_attend", RECOGNIZER_CONFIG, data_root / "synth", speech_options, lanes[1]),
        ]
        pending, next_report = set(jobs), time.perf_counter() + PROGRESS_EVERY_S
        while pending:
            finished, pending = wait(pending, timeout=max(0.0, next_report - time.perf_counter()), return_when=FIRST_COMPLETED)
            errors = [job.exception() for job in finished if job.exception() is not None]
            if errors:
                for lane in lanes:
                    lane.stop()
                raise errors[0]
            for lane, job in zip(lanes, jobs):
                if finished and job in pending:
                    lane.widen(cores)
            if pending and time.perf_counter() >= next_report:
                _say(
                    f"   [{time.perf_counter() - _STARTED:4.0f} s] "
                    + "  |  ".join(f"{lane.name} {lane.progress()}" for lane in lanes)
                )
                next_report += PROGRESS_EVERY_S
    return jobs[0].result(), jobs[1].result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "demo", help="where results go")
    parser.add_argument("--data", type=Path, default=ROOT / "data", help="where built-in data is generated")
    parser.add_argument("--fresh", action="store_true", help="delete earlier results and data, start over")
    parser.add_argument("--minutes", type=float, default=10.0, help="the whole demo's time, set-up included (default 10)")
    parser.add_argument("--started", type=float, help="when the demo's set-up began, in seconds since the epoch (default: now)")
    args = parser.parse_args(argv)
    deadline = (args.started if args.started is not None else time.time()) + args.minutes * 60
    out, data_root = args.out.resolve(), args.data.resolve()
    if args.fresh:
        runs = [_run_dir(config) for config in (CAPTIONER_CONFIG, RECOGNIZER_CONFIG)]
        for path in (out, data_root / "shapes", data_root / "synth", *runs):
            shutil.rmtree(path, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)

    _stage("Built-in speech: sentences spoken by eSpeak NG voices")
    prepare_speech(data_root / "synth")
    _stage(
        f"Both apps at once: the captioner (scenes of shapes made, {CAPTIONER_CONFIG} trained, tested with "
        f"beam search, examples captioned, attention against occlusion) and the recognizer ({RECOGNIZER_CONFIG})"
    )
    captioned, (speech_run, speech_seconds) = train_both(out, data_root, deadline)
    for example in captioned["captions"]:
        _say(f"   {Path(example['image']).name}: {example['caption']}")
    _stage("Recognizer: test on voices it never heard (beam search), transcribe test files with alignment plots")
    spoken = recognizer(out, data_root / "synth", speech_run, speech_seconds)
    caption_metrics, speech_metrics = captioned["metrics"], spoken["metrics"]
    metrics = {"captioner": caption_metrics, "recognizer": speech_metrics}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    _stage("Failure modes: identical objects, a longer scene, a dropped mask (scripts/demo/failure_modes.py)")
    _run(
        [
            sys.executable,
            "-m",
            "scripts.demo.failure_modes",
            "--captioner",
            captioned["checkpoint"],
            "--recognizer",
            spoken["checkpoint"],
            "--data",
            data_root / "synth",
            "--out",
            out,
        ]
    )
    failures = json.loads((out / "failure_modes.json").read_text())
    bottleneck = _bottleneck()
    for i, plot in enumerate(bottleneck["plots"]):
        bottleneck["plots"][i] = str(Path(shutil.copy(plot, out / "curves" / f"bottleneck_{Path(plot).name}")).relative_to(out))
    page = build_page(
        out,
        metrics,
        captioned["captions"],
        spoken["transcripts"],
        {**captioned["curves"], **spoken["curves"]},
        captioned["explain"],
        bottleneck,
        failures,
    )

    _stage("Done")
    print(f"   open {page}")
    c, r = caption_metrics, speech_metrics
    print(
        f"   captioner : exact match {c['exact_match']:.3f}  BLEU-4 {c['bleu4']:.3f}  CIDEr {c['cider']:.3f}  "
        f"pointing {c['pointing_accuracy']:.3f}  ({_trained(c)})"
    )
    print(f"   recognizer: WER {r['wer']:.3f}  CER {r['cer']:.3f}  ({_trained(r)})")
    print(f"   {time.time() - (deadline - args.minutes * 60):.0f} s in all, of {args.minutes * 60:.0f}")
    return 0


def _trained(metrics: dict) -> str:
    said = f"trained {metrics['train_seconds']:.0f} s, {metrics['steps']} steps"
    if metrics["steps"] < metrics["max_steps"]:
        said += f" of {metrics['max_steps']}: stopped by the time budget (--minutes)"
    return said


if __name__ == "__main__":
    raise SystemExit(main())
