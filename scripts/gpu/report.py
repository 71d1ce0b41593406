"""What ``scripts/gpu/check.sh`` and ``scripts/gpu/train_recognizer.sh`` write about each stage.

    python -m scripts.gpu.report env      --summary S
    python -m scripts.gpu.report stage    --summary S NAME --rc RC --seconds T --limit L [--note TEXT]
    python -m scripts.gpu.report loss     --summary S --run DIR --app NAME --csv CURVES [--steps N] [--min-drop 0.5]
    python -m scripts.gpu.report bench    --summary S --app captioner|recognizer --output TXT [--benchmarks docs/BENCHMARKS.md]
    python -m scripts.gpu.report tinybench --app captioner|recognizer --device cpu       (the benchmark at toy sizes)
    python -m scripts.gpu.report asr-run  --summary S --run DIR --batch N --csv CURVE
    python -m scripts.gpu.report devsets  --summary S --ckpt DIR --devsets DIR --device cuda --json OUT

``S`` is one JSON object (``summary.json``), one key per stage, rewritten whole after each stage,
so whatever a run leaves behind when it is cut short is complete up to the last stage.
Each command prints one line per result and exits 1 when the stage's check failed, so the shell
scripts can record it and go on to the next stage.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import os
import platform
import re
import subprocess
import time
from pathlib import Path

# Benchmark sizes for a rehearsal on a CPU: every code path of the full run, in seconds.
_TINY_BENCH = {
    "captioner": dict(
        batch=2, grid=4, size=64, vocab=200, min_len=5, max_len=5, train_repeats=1, beam_images=3, epoch_images=8, epoch_batches=1
    ),
    "recognizer": dict(
        batch=2, min_frames=100, max_frames=200, train_repeats=1, beam_utterances=3, beam_max_frames=200, epoch_utterances=100
    ),
}

# The CPU figures the GPU's are compared with: (name, regular expression over docs/BENCHMARKS.md,
# group of the match), each the full-mode row of that benchmark's table.
_BEAM_ROW = r"\| speedup_batched_beam, {what}, fp32 \| \*\*[\d.]+x\*\* \(([\d.]+) s against ([\d.]+) s"
_CPU_FIGURES = {
    "captioner": [
        ("train_step_fp32_s", r"\| training step, keys precomputed once per image, fp32 \| \*\*([\d.]+) s\*\*", 1),
        (
            "train_step_bf16_s",
            r"\| training step, keys precomputed once per image, fp32 \|.*\n\| same under bf16 autocast \| ([\d.]+) s",
            1,
        ),
        ("beam_batched_fp32_s", _BEAM_ROW.format(what="100 images"), 1),
        ("beam_one_at_a_time_fp32_s", _BEAM_ROW.format(what="100 images"), 2),
    ],
    "recognizer": [
        ("train_step_fp32_s", r"\| training step, batch 16 \| ([\d.]+) s", 1),
        ("beam_batched_fp32_s", _BEAM_ROW.format(what="64 utterances"), 1),
        ("beam_one_at_a_time_fp32_s", _BEAM_ROW.format(what="64 utterances"), 2),
    ],
}


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def record(summary: Path, key: str, value) -> None:
    """Set ``summary[key] = value`` and rewrite the file whole (a cut-short call keeps every earlier stage)."""
    data = _load(summary)
    data[key] = value
    tmp = summary.with_name(summary.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, summary)


def environment() -> dict:
    """Python, torch, CUDA and the device, as the machine reports them."""
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cpu_cores": len(os.sched_getaffinity(0)),
        "host": platform.node(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(
            device=props.name,
            device_memory_gib=round(props.total_memory / 2**30, 1),
            multiprocessors=props.multi_processor_count,
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = None
    return env


def loss_curve(run: Path, app: str, csv_path: Path, steps: int, min_drop: float) -> dict:
    """The run's ``train/loss`` by step, appended to ``csv_path`` (``app,step,loss``), and the checks:
    every value finite, logged up to within 10% of ``steps``, and the last fifth's mean at least
    ``min_drop`` (relative) below the first fifth's."""
    from scripts.gpu.loss_fell import losses

    values = losses(run, "train/loss")
    new = not csv_path.exists()
    with csv_path.open("a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(["app", "step", "loss"])
        writer.writerows((app, step, f"{loss:.5g}") for step, loss in values)
    if len(values) < 5:
        return {"ok": False, "why": f"only {len(values)} logged losses under {run}"}
    non_finite = [step for step, loss in values if not math.isfinite(loss)]
    fifth = max(1, len(values) // 5)
    first = sum(v for _, v in values[:fifth]) / fifth
    last = sum(v for _, v in values[-fifth:]) / fifth
    drop = (first - last) / abs(first)
    reached = values[-1][0] + 1
    checks = {"finite": not non_finite, "reached_steps": reached >= 0.9 * steps, "fell_enough": drop >= min_drop}
    return {
        "ok": all(checks.values()),
        **checks,
        "first_fifth_loss": round(first, 4),
        "last_fifth_loss": round(last, 4),
        "drop": round(drop, 4),
        "min_drop": min_drop,
        "last_step": values[-1][0],
        "logged": len(values),
        "first_non_finite_step": non_finite[0] if non_finite else None,
    }


def cpu_figures(app: str, benchmarks: Path) -> dict:
    """The CPU's full-mode figures of ``app``'s benchmark, read from ``docs/BENCHMARKS.md`` (missing ones left out)."""
    text = benchmarks.read_text() if benchmarks.is_file() else ""
    found = {}
    for name, pattern, group in _CPU_FIGURES[app]:
        match = re.search(pattern, text)
        if match:
            found[name] = float(match.group(group))
    return found


def measured_figures(app: str, results: dict) -> dict:
    """The same figures from a benchmark's JSON line (this machine's)."""
    train, beam = results["train_step"], results["beam"]["fp32"]
    figures = {"beam_batched_fp32_s": beam["batched_seconds"], "beam_one_at_a_time_fp32_s": beam["one_at_a_time_seconds"]}
    if app == "captioner":
        figures.update(
            train_step_fp32_s=train["precomputed_keys"]["step_seconds"],
            train_step_bf16_s=train["precomputed_keys_bf16"]["step_seconds"],
        )
    else:
        figures["train_step_fp32_s"] = train["step_seconds"]
    return figures


def bench_report(app: str, output: Path, benchmarks: Path) -> dict:
    """The benchmark's last JSON line, and each figure's CPU time (docs) over this machine's."""
    lines = [line for line in output.read_text().splitlines() if line.startswith("{")] if output.is_file() else []
    if not lines:
        return {"ok": False, "why": f"no JSON line in {output}"}
    results = json.loads(lines[-1])
    measured, cpu = measured_figures(app, results), cpu_figures(app, benchmarks)
    speedups = {name: round(cpu[name] / seconds, 2) for name, seconds in measured.items() if name in cpu and seconds > 0}
    beam = results["beam"]
    return {
        "ok": True,
        "machine": results["machine"],
        "quick": results["quick"],
        "seconds": {k: round(v, 4) for k, v in measured.items()},
        "cpu_docs_seconds": cpu,
        "cpu_docs_over_this": speedups,
        "speedup_batched_beam": {p: round(beam[p]["speedup_batched_beam"], 2) for p in ("fp32", "bf16")},
        "matmul_gflop_per_s": {"fp32": round(results["matmul_gflop_per_s"]), "bf16": round(results["matmul_gflop_per_s_bf16"])},
    }


def tiny_bench(app: str, device: str) -> int:
    """Run ``scripts.benchmarks.<app> --json`` with its sizes set to ``_TINY_BENCH[app]`` (a rehearsal)."""
    import importlib

    module = importlib.import_module("scripts.benchmarks.captioner" if app == "captioner" else "scripts.benchmarks.recognizer")
    module.BenchConfig = functools.partial(module.BenchConfig, **_TINY_BENCH[app])
    return module.main(["--device", device, "--json"])


def recognizer_run(run: Path, batch: int, csv_path: Path) -> dict:
    """Validation CER against wall time and steps (written to ``csv_path``), and utterances per second."""
    rows = []
    for path in sorted(run.glob("**/metrics.csv")):
        with path.open() as f:
            rows += list(csv.DictReader(f))
    validations = [
        (int(r["step"]), float(r["val/fit_seconds"]), float(r["val/cer"]), float(r.get("val/wer") or "nan"))
        for r in rows
        if r.get("val/cer") and r.get("val/fit_seconds")
    ]
    step_seconds = [float(r["train/seconds_per_step"]) for r in rows if r.get("train/seconds_per_step")]
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "fit_seconds", "val_cer", "val_wer"])
        writer.writerows(validations)
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    if not validations or not step_seconds:
        return {"ok": False, "why": f"no validation or step times logged under {run}", "logged_losses": len(losses)}
    median = sorted(step_seconds)[len(step_seconds) // 2]
    best = min(validations, key=lambda v: v[2])
    return {
        "ok": all(math.isfinite(v) for v in losses),
        "steps": max(int(r["step"]) for r in rows) + 1,
        "median_seconds_per_step": round(median, 4),
        "utterances_per_second": round(batch / median, 1),
        "validations": len(validations),
        "last_val_cer": validations[-1][2],
        "last_val_fit_seconds": validations[-1][1],
        "best_val_cer": best[2],
        "best_at_step": best[0],
        "losses_finite": all(math.isfinite(v) for v in losses),
    }


def score_devsets(ckpt: str, devsets: Path, device: str, json_path: Path) -> dict:
    """WER and CER of an exported model on every group of ``devsets`` (``speech-attend evaluate``'s
    loop), with ``json_path`` rewritten after each group (a cut-short call keeps the groups done)."""
    import tempfile

    from speech_attend.evaluate.conditions import Condition
    from speech_attend.evaluate.devsets import groups_of
    from speech_attend.evaluate.evaluate import evaluate_group
    from speech_attend.infer.transcribe import Transcriber

    start = time.perf_counter()
    transcriber = Transcriber.load(ckpt, device=device)
    result = {"device": device, "groups": {}}
    for group in groups_of(devsets):
        with tempfile.TemporaryDirectory() as work:
            result["groups"][group] = evaluate_group(transcriber, devsets, group, [Condition("clean")], Path(work))["clean"]
        result["seconds"] = round(time.perf_counter() - start, 1)
        json_path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    env = commands.add_parser("env")
    env.add_argument("--summary", type=Path, required=True)
    stage = commands.add_parser("stage")
    stage.add_argument("--summary", type=Path, required=True)
    stage.add_argument("name")
    stage.add_argument("--rc", type=int, required=True, help="exit status; 124 or 137: stopped at its time limit")
    stage.add_argument("--seconds", type=int, required=True)
    stage.add_argument("--limit", type=int, required=True, help="its time limit, seconds (0: skipped, no time left)")
    stage.add_argument("--note", default=None)
    loss = commands.add_parser("loss")
    loss.add_argument("--summary", type=Path, required=True)
    loss.add_argument("--run", type=Path, required=True)
    loss.add_argument("--app", required=True)
    loss.add_argument("--csv", type=Path, required=True)
    loss.add_argument("--steps", type=int, default=300)
    loss.add_argument("--min-drop", type=float, default=0.5)
    bench = commands.add_parser("bench")
    bench.add_argument("--summary", type=Path, required=True)
    bench.add_argument("--app", choices=sorted(_CPU_FIGURES), required=True)
    bench.add_argument("--output", type=Path, required=True)
    bench.add_argument("--benchmarks", type=Path, default=Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md")
    tiny = commands.add_parser("tinybench")
    tiny.add_argument("--app", choices=sorted(_TINY_BENCH), required=True)
    tiny.add_argument("--device", default="cpu")
    asr = commands.add_parser("asr-run")
    asr.add_argument("--summary", type=Path, required=True)
    asr.add_argument("--run", type=Path, required=True)
    asr.add_argument("--batch", type=int, required=True)
    asr.add_argument("--csv", type=Path, required=True)
    dev = commands.add_parser("devsets")
    dev.add_argument("--summary", type=Path, required=True)
    dev.add_argument("--ckpt", required=True)
    dev.add_argument("--devsets", type=Path, required=True)
    dev.add_argument("--device", default="cuda")
    dev.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)

    if args.command == "env":
        result = environment()
        record(args.summary, "environment", result)
        print(json.dumps(result))
        return 0
    if args.command == "stage":
        stages = _load(args.summary).get("stages", {})
        outcome = "skipped" if args.limit == 0 else "timed out" if args.rc in (124, 137) else "ok" if args.rc == 0 else "failed"
        stages[args.name] = {
            "outcome": outcome,
            "rc": args.rc,
            "seconds": args.seconds,
            "limit_s": args.limit,
            **({"note": args.note} if args.note else {}),
        }
        record(args.summary, "stages", stages)
        return 0
    if args.command == "tinybench":
        return tiny_bench(args.app, args.device)
    if args.command == "loss":
        result = loss_curve(args.run, args.app, args.csv, args.steps, args.min_drop)
        key = f"{args.app}_training"
    elif args.command == "bench":
        result = bench_report(args.app, args.output, args.benchmarks)
        key = f"{args.app}_benchmark"
    elif args.command == "asr-run":
        result = recognizer_run(args.run, args.batch, args.csv)
        key = "training"
    else:
        try:
            result = score_devsets(args.ckpt, args.devsets, args.device, args.json)
        except (ValueError, RuntimeError, OSError) as err:
            result = {"ok": False, "why": str(err).splitlines()[0]}
        else:
            result = {
                "ok": True,
                **{k: v for k, v in result.items() if k != "groups"},
                "groups": {g: {m: r[m] for m in ("utterances", "wer", "cer") if m in r} for g, r in result["groups"].items()},
            }
        key = "devsets"
    previous = _load(args.summary).get(key, {})
    record(args.summary, key, {**previous, **result})
    print(f"{key}: {json.dumps(result)}")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
