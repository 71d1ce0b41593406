"""scripts/gpu/report.py: the checks and ratios that the GPU scripts write to summary.json."""

import json
from pathlib import Path

import pytest

from scripts.gpu import report as gpu_report

ROOT = Path(__file__).resolve().parents[3]


def _metrics(run: Path, losses: list[float]) -> None:
    folder = run / "version_0"
    folder.mkdir(parents=True)
    rows = ["epoch,step,train/loss"] + [f"0,{5 * i + 4},{loss}" for i, loss in enumerate(losses)]
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("app", ["captioner", "recognizer"])
def test_every_cpu_figure_is_found_in_the_benchmarks_doc(app):
    # A reworded table in docs/BENCHMARKS.md would silently drop the GPU/CPU ratios.
    found = gpu_report.cpu_figures(app, ROOT / "docs" / "BENCHMARKS.md")
    assert set(found) == {name for name, _, _ in gpu_report._CPU_FIGURES[app]}
    assert all(seconds > 0 for seconds in found.values())


def test_loss_curve_passes_a_run_whose_loss_halves(tmp_path):
    _metrics(tmp_path / "run", [4.0 - 0.05 * i for i in range(60)])
    result = gpu_report.loss_curve(tmp_path / "run", "captioner", tmp_path / "curves.csv", steps=300, min_drop=0.5)
    assert result["ok"] and result["drop"] >= 0.5
    assert (tmp_path / "curves.csv").read_text().splitlines()[:2] == ["app,step,loss", "captioner,4,4"]


def test_loss_curve_fails_a_nan_a_short_run_and_a_small_drop(tmp_path):
    _metrics(tmp_path / "nan", [4.0 - 0.05 * i for i in range(59)] + [float("nan")])
    nan = gpu_report.loss_curve(tmp_path / "nan", "a", tmp_path / "c.csv", steps=300, min_drop=0.5)
    assert not nan["ok"] and not nan["finite"] and nan["first_non_finite_step"] == 299
    _metrics(tmp_path / "short", [4.0 - 0.1 * i for i in range(20)])
    short = gpu_report.loss_curve(tmp_path / "short", "a", tmp_path / "c.csv", steps=300, min_drop=0.5)
    assert not short["ok"] and not short["reached_steps"]
    _metrics(tmp_path / "flat", [4.0 - 0.01 * i for i in range(60)])
    flat = gpu_report.loss_curve(tmp_path / "flat", "a", tmp_path / "c.csv", steps=300, min_drop=0.5)
    assert not flat["ok"] and not flat["fell_enough"]


def test_bench_report_divides_the_docs_cpu_time_by_the_measured_one(tmp_path):
    beam = {"batched_seconds": 0.5, "one_at_a_time_seconds": 2.0, "speedup_batched_beam": 4.0}
    results = {
        "machine": "test",
        "quick": False,
        "matmul_gflop_per_s": 1.0,
        "matmul_gflop_per_s_bf16": 2.0,
        "train_step": {"step_seconds": 0.25},
        "beam": {"fp32": beam, "bf16": beam},
    }
    output = tmp_path / "bench.txt"
    output.write_text("recognizer benchmark ...\n" + json.dumps(results) + "\n")
    docs = tmp_path / "BENCHMARKS.md"
    docs.write_text(
        "| training step, batch 16 | 5.00 s, 2692 frames/s |\n"
        "| speedup_batched_beam, 64 utterances, fp32 | **3.00x** (10.00 s against 30.00 s; 64/64 equal) |\n"
    )
    report = gpu_report.bench_report("recognizer", output, docs)
    assert report["ok"]
    assert report["cpu_docs_over_this"] == {
        "train_step_fp32_s": 20.0,
        "beam_batched_fp32_s": 20.0,
        "beam_one_at_a_time_fp32_s": 15.0,
    }


def test_stage_records_a_time_limit_as_timed_out(tmp_path):
    summary = tmp_path / "summary.json"
    assert gpu_report.main(["stage", "--summary", str(summary), "fit", "--rc", "124", "--seconds", "90", "--limit", "90"]) == 0
    assert gpu_report.main(["stage", "--summary", str(summary), "bench", "--rc", "3", "--seconds", "0", "--limit", "0"]) == 0
    stages = json.loads(summary.read_text())["stages"]
    assert stages["fit"]["outcome"] == "timed out" and stages["bench"]["outcome"] == "skipped"
