"""The recipe search (scripts/experiments/recipe_search.py): one YAML file per recipe, and the
bookkeeping: a stage-two run counts from the checkpoint it went on from."""

import csv
import json
from pathlib import Path

import pytest
import torch

from scripts.experiments import recipe_search

FIELDS = ["epoch", "step", "train/loss", "val/cer", "val/fit_seconds", "val/fit_cpu_seconds"]


def _write_run(run: Path, rows: list[dict], end: dict) -> None:
    run.mkdir(parents=True)
    with (run / "metrics.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    (run / recipe_search.SEARCH_END).write_text(json.dumps(end))


def test_a_stage_two_run_counts_its_time_steps_and_throughput_from_where_it_started(tmp_path):
    run = recipe_search._run_dir(tmp_path, "FC")
    rows = [  # the long run's rows before the start (they came with the checkpoint's folder), then stage two's
        {"epoch": 30, "step": 30000, "val/cer": 0.25, "val/fit_seconds": 7000.0, "val/fit_cpu_seconds": 7000.0},
        {"epoch": 36, "step": 36000, "val/cer": 0.22, "val/fit_seconds": 8800.0, "val/fit_cpu_seconds": 8800.0},
        {"epoch": 40, "step": 40000, "val/cer": 0.21, "val/fit_seconds": 9900.0, "val/fit_cpu_seconds": 9900.0},
        {"epoch": 45, "step": 45000, "val/cer": 0.19, "val/fit_seconds": 11100.0, "val/fit_cpu_seconds": 11000.0},
    ]
    end = {
        "steps": 46000,
        "seconds": 11400.0,
        "cpu_seconds": 11300.0,
        "batch": 16,
        "weights": 1_900_000,
        "final_cer": 0.185,
        "start_step": 36000,
        "start_seconds": 9000.0,
        "start_cpu_seconds": 9000.0,
    }
    _write_run(run, rows, end)

    result = recipe_search.summarise(tmp_path, "FC")

    assert [p["step"] for p in result["curve"]] == [40000, 45000, 46000]  # nothing from before the start
    assert [p["seconds"] for p in result["curve"]] == [900.0, 2100.0, 2400.0]
    assert result["seconds"] == 2400.0 and result["cpu_seconds"] == 2300.0
    assert result["utterances_per_second_per_core"] == pytest.approx(10000 * 16 / 2400, abs=0.05)
    assert result["final_cer"] == 0.185


def test_a_stage_two_run_records_its_start_and_a_first_stage_run_does_not(tmp_path):
    start = tmp_path / "start.ckpt"
    torch.save({"global_step": 36000, "fit_seconds": 9000.0, "fit_cpu_seconds": 8900.0}, start)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    torch.save(
        {
            "global_step": 46000,
            "fit_seconds": 11400.0,
            "fit_cpu_seconds": 11300.0,
            "datamodule_hyper_parameters": {"batch_size": 16},
            "state_dict": {"w": torch.zeros(3, 2)},
        },
        run / "checkpoints" / "last.ckpt",
    )
    with (run / "metrics.csv").open("w", newline="") as file:
        csv.DictWriter(file, FIELDS).writeheader()
        csv.DictWriter(file, FIELDS).writerow({"step": 46000, "val/cer": 0.185})

    assert "start_step" not in recipe_search.record_end(run)
    end = recipe_search.record_end(run, start)
    assert (end["start_step"], end["start_seconds"], end["start_cpu_seconds"]) == (36000, 9000.0, 8900.0)
    assert (end["steps"], end["weights"], end["final_cer"]) == (46000, 6, 0.185)


def test_stage_two_candidates_need_a_starting_checkpoint(capsys):
    assert recipe_search.main(["--only", "FC"]) == 2
    assert "need --from" in capsys.readouterr().err
    assert recipe_search.main(["--only", "FC", "--from", "no/such.ckpt"]) == 2
    assert "no/such.ckpt: no such checkpoint" in capsys.readouterr().err


def test_a_candidate_stopped_by_sigterm_is_scored_and_a_failed_one_stops_the_search(tmp_path, monkeypatch, capsys):
    start = tmp_path / "start.ckpt"
    torch.save({"global_step": 1, "fit_seconds": 60.0}, start)
    validated = []

    class Finished:
        def __init__(self, code):
            self.code = code

        def wait(self):
            return self.code

    codes = {"FC": 0, "FS": recipe_search.STOPPED}
    monkeypatch.setattr(recipe_search, "_train", lambda out, name, *rest: Finished(codes[name]))
    monkeypatch.setattr(recipe_search, "_validate", lambda out, name, *rest: validated.append(name))
    monkeypatch.setattr(recipe_search, "summarise", lambda out, name: None)
    monkeypatch.setattr(recipe_search, "plot", lambda *args: None)
    argv = ["--from", str(start), "--only", "FC,FS", "--out", str(tmp_path / "out"), "--minutes", "1"]
    assert recipe_search.main(argv) == 0
    assert validated == ["FC", "FS"]  # the stopped one is scored at its last checkpoint too

    codes["FS"] = 1  # a crash is not a stop
    validated.clear()
    assert recipe_search.main(argv) == 1
    assert not validated and "exited [0, 1]" in capsys.readouterr().err


def test_a_candidate_from_an_exported_folder_starts_from_its_weights_then_goes_on_from_its_own_run(tmp_path):
    exported = tmp_path / "exported"
    exported.mkdir()
    before, overrides = recipe_search._start(exported, 5000, tmp_path / "out", "H")
    assert before == 0.0  # a new run: its clock starts at 0
    assert overrides[-2:] == ["--init_from", str(exported)] and overrides[:-2] == [
        *recipe_search.FROM_EXPORT,
        "--trainer.max_steps",
        "5000",
    ]
    last = recipe_search._run_dir(tmp_path / "out", "H") / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"a checkpoint of the run")  # stopped half-way: `--ckpt_path last` goes on, not a second start
    assert "--init_from" not in recipe_search._start(exported, 5000, tmp_path / "out", "H")[1]


def test_every_candidate_s_overrides_name_options_the_cli_knows(capsys):
    """A misspelt override would fail a candidate only when its run starts, hours into a search."""
    from speech_attend.cli import main

    overrides = [option for recipe in recipe_search.RECIPES.values() for option in recipe.arguments()]
    args = ["fit", "--config", str(recipe_search.CONFIG), *overrides, *recipe_search.FROM_EXPORT, "--print_config"]
    try:
        code = main(args)
    except SystemExit as stop:
        code = stop.code
    assert code in (0, None), capsys.readouterr().err
    assert "utterance_mean: true" in capsys.readouterr().out  # UM's (and HFN's) override reached the config


def test_a_seed_given_to_the_search_reaches_each_candidate_s_fit(tmp_path, monkeypatch):
    """Two seeds draw different first weights: a search repeated on another seed must train with it."""
    started = []

    class Started:
        def __init__(self, command, **kwargs):
            started.append(command)

    monkeypatch.setattr(recipe_search.subprocess, "Popen", Started)
    recipe_search._train(tmp_path, "A", 1.0, None, seed=7)
    recipe_search._train(tmp_path, "UM", 1.0, None)
    with_seed, without = started
    assert with_seed[with_seed.index("--seed_everything") + 1] == "7"
    assert "--seed_everything" not in without  # the config's seed (0), as every earlier search


def test_each_recipe_is_a_file_of_overrides_with_a_one_line_description():
    recipes = recipe_search.RECIPES
    assert {"A", "UM", "FC", "HFA", "CS25N"} <= set(recipes) and len(recipes) == len(
        list(recipe_search.RECIPES_DIR.glob("*.yaml"))
    )
    assert recipes["A"].overrides == {} and recipes["A"].stage == 1 and recipes["FC"].stage == 2
    assert recipes["FC"].arguments() == [
        "--data.augment.noise_prob",
        "0.6",
        "--data.augment.babble_prob",
        "0.7",
        "--data.augment.snr_db",
        "[0,20]",
    ]
    assert recipes["UM"].arguments() == ["--model.features.utterance_mean", "true"]
    assert all(r.description and "\n" not in r.description for r in recipes.values())


def test_a_recipe_without_its_description_or_stage_is_refused(tmp_path):
    (tmp_path / "X.yaml").write_text("stage: 3\noverrides: {}\n")
    with pytest.raises(ValueError, match="X.yaml: expected a one-line description, stage 1 or 2"):
        recipe_search.load_recipes(tmp_path)
