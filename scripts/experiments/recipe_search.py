"""The recognizer's recipe search: candidates that differ from one base in one thing, at equal wall time.

    python -m scripts.experiments.recipe_search [--minutes 20] [--only A,S] [--out outputs/search] [--plot-only]
    python -m scripts.experiments.recipe_search --from outputs/search/A_last_36818.ckpt --max-steps 60000 \
        --minutes 95 --only FC,FS --out outputs/ft

Each candidate is a recipe, one YAML file in ``recipes/`` beside this script: ``NAME.yaml`` holds a
one-line ``description`` of what it changes, its ``stage`` and its ``overrides`` of
``configs/speech_attend/broad_las.yaml`` (``key: value``, as ``fit``'s ``--key value``). A stage-1
recipe trains from the start; a stage-2 recipe goes on from a checkpoint (``--from``, the long run's
end), for ``--minutes`` more wall time, with the cosine schedule stretched to ``--max-steps`` (the
learning rate rises again to where the longer cosine stands, then decays). ``--from`` also takes an
exported folder (``models/speech_attend``: a model whose run is gone): then each candidate is a new
run from its weights (``fit --init_from``) with a schedule of its own, ``--max-steps`` long, and
none of a first run's start-up stages (``FROM_EXPORT``).

Two candidates train at once, one thread each (one core each on a 2-core machine), for
``--minutes`` of wall time (``--trainer.max_time``); then ``validate`` scores each one's last
checkpoint on the same 200 dev utterances (held-out sentences and voices) as its validations
during training. It writes:

- ``OUT/<name>/``: the run (``version_0/metrics.csv`` with ``val/cer`` and ``val/fit_seconds``);
- ``OUT/<name>.log``: the run's output;
- ``OUT/search.json``: per candidate, its throughput (utterances a second per core), its
  validation CER against wall time, its CER at the end and the slope of its last stretch;
- ``OUT/search.png``: validation CER against wall time, a line per candidate.

A candidate stopped by hand with SIGTERM (to free its core) is scored at the checkpoint it saved.

The winner is the lowest CER at equal time, with the slope at the end as the tie-breaker: what a
longer run of it would give, not what it gives per step. ``--plot-only`` rebuilds the JSON and the
plot from runs already there.

One seed draws one set of first weights and one order of batches, and two seeds can differ at a
few thousand steps by more than two candidates do (docs/BENCHMARKS.md, "Recipe search: the history of the shipped recognizer"): before calling
a winner, repeat the pair on another seed (``--seed 1 --out outputs/search_seed1``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from shared.training.schedule import max_time

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "speech_attend" / "broad_las.yaml"
RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
SPEECH_ATTEND = [sys.executable, "-m", "speech_attend.cli"]


@dataclass(frozen=True)
class Recipe:
    """One candidate: what it changes, whether it trains from the start (1) or goes on (2), its overrides."""

    name: str
    description: str
    stage: int
    overrides: dict

    def arguments(self) -> list[str]:
        """The overrides as ``fit`` takes them: ``--key value`` (lists as ``[a,b]``, booleans as ``true``)."""
        arguments = []
        for key, value in self.overrides.items():
            text = json.dumps(value, separators=(",", ":")) if isinstance(value, (list, bool)) else str(value)
            arguments += [f"--{key}", text]
        return arguments


def load_recipes(folder: Path = RECIPES_DIR) -> dict[str, Recipe]:
    """Every ``NAME.yaml`` of ``folder``, by name (in the files' order).

    Raises:
        ValueError: a file without its one-line description, a stage of 1 or 2, or a mapping of overrides.
    """
    recipes = {}
    for path in sorted(folder.glob("*.yaml")):
        fields = yaml.safe_load(path.read_text()) or {}
        description, stage, overrides = fields.get("description"), fields.get("stage"), fields.get("overrides")
        if (
            not isinstance(description, str)
            or "\n" in description.strip()
            or stage not in (1, 2)
            or not isinstance(overrides, dict)
        ):
            raise ValueError(f"{path}: expected a one-line description, stage 1 or 2, and a mapping of overrides")
        recipes[path.stem] = Recipe(path.stem, description.strip(), stage, overrides)
    return recipes


RECIPES = load_recipes()
CANDIDATES = [name for name, recipe in RECIPES.items() if recipe.stage == 1]  # trained from the start
STAGE_TWO = [name for name, recipe in RECIPES.items() if recipe.stage == 2]  # going on from --from

# A candidate started from an exported model: a new optimiser and schedule (a short warm-up), and
# none of the stages that help a model that has not aligned yet (guided attention, teacher forcing
# first, a clean start, the shortest-first epoch); the CTC weight stays at its final value, and
# validation decodes as the runs from checkpoints did (greedy, no language model, no length bonus).
FROM_EXPORT = [
    "--model.guided_attention",
    "0",
    "--model.scheduled_sampling_start",
    "0",
    "--model.ctc_weight",
    "0.3",
    "--model.ctc_weight_final",
    "0.3",
    "--model.optimizer.warmup_steps",
    "300",
    "--model.decoding.lm_weight",
    "0",
    "--model.decoding.length_bonus",
    "0",
    "--model.decoding.beam_size",
    "8",
    "--data.augment.start_step",
    "0",
    "--data.augment.ramp_steps",
    "0",
    "--data.curriculum_epochs",
    "0",
]


def _run_dir(out: Path, name: str) -> Path:
    return out / name / "version_0"


def _overrides(name: str, data: Path | None) -> list[str]:
    return RECIPES[name].arguments() + ([] if data is None else ["--data.data_dir", str(data)])


def _start(start: Path | None, max_steps: int | None, out: Path, name: str) -> tuple[float, list[str]]:
    """A stage-two candidate's starting checkpoint, copied into its run (once): the wall time it
    had trained (Lightning's timer resumes there) and the overrides that stretch the schedule. From
    an exported folder: a new run from its weights (until the run has a checkpoint to go on from)."""
    if start is None:
        return 0.0, []
    last = _run_dir(out, name) / "checkpoints" / "last.ckpt"
    if start.is_dir():
        schedule = [] if max_steps is None else ["--trainer.max_steps", str(max_steps)]
        return 0.0, FROM_EXPORT + schedule + ([] if last.is_file() else ["--init_from", str(start)])
    if not last.is_file():
        last.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(start, last)
    before = float(torch.load(start, map_location="cpu", weights_only=True).get("fit_seconds", 0.0))
    return before, [] if max_steps is None else ["--trainer.max_steps", str(max_steps)]


def _train(
    out: Path,
    name: str,
    minutes: float,
    data: Path | None,
    start: Path | None = None,
    max_steps: int | None = None,
    seed: int | None = None,
) -> subprocess.Popen:
    before, schedule = _start(start, max_steps, out, name)
    overrides = _overrides(name, data) + schedule + ([] if seed is None else ["--seed_everything", str(seed)])
    log = (out / f"{name}.log").open("a")
    command = [
        *SPEECH_ATTEND,
        "fit",
        "--config",
        str(CONFIG),
        "--trainer.default_root_dir",
        str(out / name),
        "--trainer.max_time",
        max_time(before + minutes * 60),
        "--trainer.enable_progress_bar",
        "false",
        *overrides,
    ]
    if (_run_dir(out, name) / "checkpoints" / "last.ckpt").is_file():
        command += ["--ckpt_path", "last"]  # a search stopped half-way goes on
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)


SEARCH_END = "search_end.json"  # where a candidate stood when its time ran out
# A candidate stopped by SIGTERM (to free its core) saved its last checkpoint first: it is scored
# there like the others, and its shorter time is in its record.
STOPPED = 128 + signal.SIGTERM  # a shell's exit status for a process ended by that signal


def _validate(out: Path, name: str, data: Path | None, start: Path | None = None) -> None:
    """Score the last checkpoint on the validation utterances (appends a val/cer row to metrics.csv)
    and write ``search_end.json``: its steps, wall and processor seconds, batch, weights and CER."""
    with (out / f"{name}.log").open("a") as log:
        command = [
            *SPEECH_ATTEND,
            "validate",
            "--config",
            str(CONFIG),
            "--trainer.default_root_dir",
            str(out / name),
            *_overrides(name, data),
            *(FROM_EXPORT if start is not None and start.is_dir() else []),
            "--ckpt_path",
            str(_run_dir(out, name) / "checkpoints" / "last.ckpt"),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, check=True)
    record_end(_run_dir(out, name), start)


def record_end(run: Path, start: Path | None = None) -> dict:
    """``search_end.json`` of a run whose time ran out and whose last checkpoint was just validated;
    a stage-two run also records where it started (``start_step``, ``start_seconds``)."""
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    with (run / "metrics.csv").open(newline="") as file:
        final = [float(r["val/cer"]) for r in csv.DictReader(file) if r.get("val/cer") and not r.get("val/fit_seconds")]
    end = {
        "steps": int(ckpt["global_step"]),
        "seconds": float(ckpt.get("fit_seconds", 0.0)),
        "cpu_seconds": float(ckpt.get("fit_cpu_seconds", 0.0)),
        "batch": int(ckpt["datamodule_hyper_parameters"]["batch_size"]),
        "weights": sum(p.numel() for k, p in ckpt["state_dict"].items() if not k.endswith(("mean", "std", "frames"))),
        "final_cer": final[-1],
    }
    if start is not None and not start.is_dir():  # from an exported folder, the run counts from its own step 0
        first = torch.load(start, map_location="cpu", weights_only=True)
        end["start_step"], end["start_seconds"] = int(first["global_step"]), float(first.get("fit_seconds", 0.0))
        end["start_cpu_seconds"] = float(first.get("fit_cpu_seconds", 0.0))
    (run / SEARCH_END).write_text(json.dumps(end, indent=1) + "\n")
    return end


def summarise(out: Path, name: str) -> dict | None:
    """A candidate's curve and throughput from its run's metrics.csv and ``search_end.json``.

    Only the search's stretch counts: a run continued later (the long run) adds rows after it, and
    a stage-two run counts from its start (its time, steps and processor time from there).
    """
    run = _run_dir(out, name)
    if not (run / "metrics.csv").is_file() or not (run / SEARCH_END).is_file():
        return None
    end = json.loads((run / SEARCH_END).read_text())
    first_step, first_seconds, first_cpu = (
        end.get("start_step", 0),
        end.get("start_seconds", 0.0),
        end.get("start_cpu_seconds", 0.0),
    )
    seconds, steps, cpu_seconds, batch = (
        end["seconds"] - first_seconds,
        end["steps"],
        end["cpu_seconds"] - first_cpu,
        end["batch"],
    )
    with (run / "metrics.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    curve = [
        (
            float(r["val/fit_seconds"]) - first_seconds,
            int(r["step"]),
            float(r["val/cer"]),
            float(r.get("val/fit_cpu_seconds") or first_cpu) - first_cpu,
        )
        for r in rows
        if r.get("val/cer") and r.get("val/fit_seconds") and first_step < int(r["step"]) <= steps
    ]
    curve.append((seconds, steps, end["final_cer"], cpu_seconds))  # the last checkpoint's score, after the time ran out
    curve = sorted(
        {point[1]: point for point in curve}.values()
    )  # one point per step (a stop's validation and the final score coincide)
    weights = end["weights"]
    slope = None
    if len(curve) >= 2:  # CER change per 10 minutes over the last stretch (at most the last third of the time)
        late = [point for point in curve if point[0] >= curve[-1][0] * 2 / 3] or curve[-2:]
        first, last = (late[0], late[-1]) if len(late) >= 2 else (curve[-2], curve[-1])  # (seconds, step, cer, cpu)
        slope = (last[2] - first[2]) / max(1.0, last[0] - first[0]) * 600
    return {
        "name": name,
        "what": RECIPES[name].description,
        "weights": weights,
        "steps": steps,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu_seconds, 1),
        "utterances_per_second_per_core": round((steps - first_step) * batch / max(seconds, 1.0), 1),
        "utterances_per_cpu_second": round((steps - first_step) * batch / max(cpu_seconds, 1.0), 1),
        "curve": [{"seconds": round(s, 1), "step": n, "cer": round(c, 4), "cpu_seconds": round(u, 1)} for s, n, c, u in curve],
        "final_cer": curve[-1][2] if curve else None,
        "slope_per_10_min": None if slope is None else round(slope, 4),
    }


def plot(results: list[dict], path: Path, title: str = "Recipe search at equal wall time") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        xs = [p["seconds"] / 60 for p in r["curve"]]
        ys = [p["cer"] for p in r["curve"]]
        ax.plot(xs, ys, marker="o", markersize=3, label=f"{r['name']}: {r['what'][:48]}")
    ax.set_xlabel("wall time, minutes (one core each)")
    ax.set_ylabel("validation CER (greedy, 200 dev utterances)")
    ax.set_ylim(0, min(1.05, 1.15 * max((p["cer"] for r in results for p in r["curve"]), default=1.0)))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{title} (held-out sentences and voices)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0, help="wall time per candidate (default 20)")
    parser.add_argument("--only", help="comma-separated candidates, in pairs (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "search")
    parser.add_argument("--data", type=Path, default=None, help="corpus folder (default: the config's, data/broad)")
    parser.add_argument("--plot-only", action="store_true", help="only rebuild search.json and search.png")
    parser.add_argument(
        "--from",
        dest="start",
        type=Path,
        help="stage two: the checkpoint each candidate goes on from, or an exported folder each starts a new run from",
    )
    parser.add_argument("--max-steps", type=int, help="stage two: the stretched schedule's last step")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the runs' seed (default: the config's, 0): the first weights and the batches' order; give each seed its own --out",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",")] if args.only else list(STAGE_TWO if args.start else CANDIDATES)
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        print(
            f"recipe_search: error: unknown candidates {unknown}; expected some of {CANDIDATES}, "
            f"or with --from some of {STAGE_TWO}",
            file=sys.stderr,
        )
        return 2
    mixed = [n for n in names if (n in STAGE_TWO) != bool(args.start)]
    if mixed and not args.plot_only:
        print(
            f"recipe_search: error: {mixed}: stage-two candidates ({STAGE_TWO}) need --from, the others train from the start",
            file=sys.stderr,
        )
        return 2
    if args.start and not args.start.is_file() and not (args.start / "model.safetensors").is_file():
        print(f"recipe_search: error: --from {args.start}: no such checkpoint or exported folder", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.plot_only:
        for first in range(0, len(names), 2):
            pair = names[first : first + 2]
            start = time.time()
            print(f"training {', '.join(pair)} for {args.minutes:g} minutes each", flush=True)
            running = [_train(args.out, name, args.minutes, args.data, args.start, args.max_steps, args.seed) for name in pair]
            codes = [p.wait() for p in running]
            if any(code not in (0, STOPPED) for code in codes):
                print(f"recipe_search: error: training {pair} exited {codes}; see {args.out}/<name>.log", file=sys.stderr)
                return 1
            for name in pair:
                _validate(args.out, name, args.data, args.start)
            print(f"  done in {time.time() - start:.0f} s", flush=True)
    results = [r for r in (summarise(args.out, name) for name in names) if r]
    (args.out / "search.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(
        results,
        args.out / "search.png",
        "Stage two at equal wall time" if names[0] in STAGE_TWO else "Recipe search at equal wall time",
    )
    for r in sorted(results, key=lambda r: (r["final_cer"], r["slope_per_10_min"] or 0)):
        print(
            f"{r['name']:>4}  CER {r['final_cer']:.3f} after {r['seconds'] / 60:.1f} min, {r['steps']} steps, "
            f"{r['utterances_per_second_per_core']} utt/s/core, slope {r['slope_per_10_min']} per 10 min: {r['what']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
