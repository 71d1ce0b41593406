"""The demo's results page links only files that exist, with relative links; the demo's two
training lanes stop together when one fails, and the one still training gets the other's cores
(the lanes themselves: tests/scripts/demo/test_demo_lanes.py)."""

import os
import sys
import time
from pathlib import Path

import pytest

from scripts.demo import run as demo
from scripts.demo.page import build_page, highlight_errors, missing_links


def _touch(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path.name if path.parent.name == "" else f"{path.parent.name}/{path.name}"


def test_page_links_every_artifact_and_nothing_missing(tmp_path):
    captions = [
        {
            "image": _touch(tmp_path / "images/a.png"),
            "caption": "a red circle",
            "references": ["A red circle.", "A small red circle."],
            "overlay": _touch(tmp_path / "overlays/a.png"),
        }
    ]
    transcripts = [
        {
            "audio": _touch(tmp_path / "audio/u.wav"),
            "reference": "the cat sat",
            "text": "the hat sat",
            "alignment": _touch(tmp_path / "alignments/u.png"),
            "duration_s": 1.5,
        }
    ]
    curves = {"captioner": _touch(tmp_path / "curves/captioner.png")}
    metrics = {"captioner": {"exact_match": 1.0, "train_seconds": 251.5}, "recognizer": {"cer": 0.05, "wer": None}}
    page = build_page(tmp_path, metrics, captions, transcripts, curves)
    text = page.read_text()
    assert missing_links(page) == []
    for link in ("images/a.png", "overlays/a.png", "audio/u.wav", "alignments/u.png", "curves/captioner.png"):
        assert f'src="{link}"' in text
    assert "<audio controls" in text and "0.050" in text and "252 s" in text
    assert "exact match" in text and "A small red circle." in text

    (tmp_path / "overlays/a.png").unlink()
    assert missing_links(page) == ["overlays/a.png"]


def test_absolute_links_count_as_missing(tmp_path):
    page = tmp_path / "index.html"
    page.write_text(f'<img src="{tmp_path}/x.png"><a href="https://example.org">x</a>')
    assert len(missing_links(page)) == 2


def test_transcript_errors_are_highlighted():
    marked = highlight_errors("the black cat sat down", "the back cat sat down now")
    assert '<span class="sub" title="reference: black">back</span>' in marked
    assert "<ins>now</ins>" in marked
    assert "<del>" in highlight_errors("a b c", "a c")


def test_a_caption_is_marked_exact_only_when_it_equals_a_reference(tmp_path):
    def page_for(caption):
        item = {"image": "a.png", "caption": caption, "references": ["A red circle.", "A small red circle."], "overlay": None}
        return build_page(tmp_path, {}, [item], [], {}).read_text()

    assert "&#10003; exact match" in page_for("a small red circle")
    assert "differs from every reference" in page_for("a big red circle")


def test_page_shows_the_experiments_or_the_command_that_makes_them(tmp_path):
    explain = {
        "summary": {
            "images": 2,
            "words": 9,
            "peak_in_top3": 0.5,
            "peaks_differ": 0.6,
            "rank_correlation": 0.2,
            "drop_at_attention_peak": 0.4,
            "drop_at_random": 0.01,
        },
        "disagree": [
            {
                "png": _touch(tmp_path / "explain/a.png"),
                "caption": "a red circle",
                "rank_correlation": -0.1,
                "in_top3": 1,
                "words": 4,
            }
        ],
        "agree": [
            {
                "png": _touch(tmp_path / "explain/b.png"),
                "caption": "a blue square",
                "rank_correlation": 0.8,
                "in_top3": 4,
                "words": 5,
            }
        ],
    }
    failures = {
        "identical": {
            "caption": "a red circle left of a red circle",
            "reference": "a big red circle left of a big red circle",
            "image": _touch(tmp_path / "failures" / "identical.png"),
            "words": [{"word": "red", "on_first": 0.4, "on_second": 0.5}],
        },
        "longer": {
            "caption": "a red circle",
            "reference": "six objects",
            "image": _touch(tmp_path / "failures" / "longer.png"),
            "objects": 6,
        },
        "wrong_mask": {
            "reference": "no bird spoke",
            "seconds": 0.9,
            "padded_to_seconds": 3.9,
            "mask_right": {
                "text": "no bird spoke",
                "cer": 0.0,
                "attention_on_padding": 0.0,
                "image": _touch(tmp_path / "failures" / "mask_right.png"),
            },
            "mask_dropped": {"text": "no bird spoke spoke", "cer": 0.4, "attention_on_padding": 0.3, "image": None},
        },
    }
    not_run = {"command": "python -m scripts.experiments.bottleneck --quick", "plots": []}
    page = build_page(tmp_path, {}, [], [], {}, explain, not_run, failures)
    text = page.read_text()
    assert missing_links(page) == []
    assert "explain/a.png" in text and "explain/b.png" in text and "50%" in text  # the summary's numbers
    assert "Not run yet" in text and "python -m scripts.experiments.bottleneck --quick" in text
    assert "30% of the attention on padding" in text and "failures/identical.png" in text
    run = {
        "command": "python -m scripts.experiments.bottleneck",
        "plots": [_touch(tmp_path / "curves/bottleneck_recognizer.png")],
    }
    text = build_page(tmp_path, {}, [], [], {}, explain, run, failures).read_text()
    assert 'src="curves/bottleneck_recognizer.png"' in text and "Not run yet" not in text


def test_demo_training_passes_its_extra_settings_to_fit_and_test(tmp_path, monkeypatch):
    # The demo trains the captioner under bf16 autocast where the CPU has bf16 units: the setting
    # must reach both the training and the test command, or the test would score another model's numerics.

    root = tmp_path / "run"
    commands = []

    def fake_run(args, lane=None):
        commands.append(args)
        if "fit" in args:
            (root / "version_0" / "checkpoints").mkdir(parents=True)
            (root / "version_0" / "checkpoints" / "last.ckpt").write_bytes(b"x")
        else:
            (root / "version_0" / "test_metrics.json").write_text('{"exact_match": 1.0}')

    monkeypatch.setattr(demo, "_run", fake_run)
    monkeypatch.setattr(demo, "_run_dir", lambda config: root)
    extra = ("--trainer.precision", "bf16-mixed")
    run, _ = demo._fit("show_attend", "configs/show_attend/demo.yaml", tmp_path, extra)
    metrics = demo._test("show_attend", "configs/show_attend/demo.yaml", tmp_path, run, extra)
    assert run == root / "version_0" and metrics == {"exact_match": 1.0}
    assert [c[3] for c in commands] == ["fit", "test"]
    assert all(c[-2:] == ["--trainer.precision", "bf16-mixed"] for c in commands)


def test_a_failing_lane_stops_the_demo_with_its_log_and_stops_the_other_lane(tmp_path, monkeypatch, capsys):

    def failing_captioner(out, data_dir, lane, limit):
        demo._run([sys.executable, "-c", "import sys; print('the captioner broke'); sys.exit(3)"], lane)

    started = []

    def long_fit(module, config, data_dir, extra, lane):
        started.append(time.perf_counter())
        demo._run([sys.executable, "-c", "import time; time.sleep(60)"], lane)

    monkeypatch.setattr(demo, "captioner", failing_captioner)
    monkeypatch.setattr(demo, "_fit", long_fit)
    monkeypatch.setattr(demo, "PROGRESS_EVERY_S", 0.2)
    start = time.perf_counter()
    with pytest.raises(SystemExit) as stopped:
        demo.train_both(tmp_path / "demo", tmp_path / "data", deadline=time.time() + 600)
    assert "exit code 3" in str(stopped.value) and "captioner.log" in str(stopped.value)
    shown = capsys.readouterr().out
    assert "the captioner broke" in shown  # the failing command's log tail is shown, the stopped one's is not
    assert "time.sleep" not in shown
    assert started and time.perf_counter() - start < 30  # the other lane's 60 s command was stopped


def test_the_lane_still_training_is_handed_every_core_once_the_other_is_done(tmp_path, monkeypatch):

    seen = {}

    def short_captioner(out, data_dir, lane, limit):
        seen["caption_limit"] = limit
        demo._run([sys.executable, "-c", "import os; print(os.environ['OMP_NUM_THREADS'])"], lane)

    def long_fit(module, config, data_dir, extra, lane):
        seen["extra"] = extra
        # Waits (at most 30 s) for the threads file that the training's ThreadsFromFile reads.
        probe = (
            f"import os, time\npath = {str(lane.threads_file)!r}\nprint(os.environ['OMP_NUM_THREADS'])\n"
            "deadline = time.time() + 30\nwhile not os.path.exists(path) and time.time() < deadline: time.sleep(0.05)\n"
            "print(open(path).read().strip() if os.path.exists(path) else 'no file')"
        )
        demo._run([sys.executable, "-c", probe], lane)
        seen["recognizer"] = lane.log.read_text().splitlines()[-2:]
        return "run", 1.0

    stale = tmp_path / "demo" / "logs" / "recognizer.threads"
    stale.parent.mkdir(parents=True)
    stale.write_text("7\n")  # a previous run's: must not reach this one
    monkeypatch.setattr(demo, "captioner", short_captioner)
    monkeypatch.setattr(demo, "_fit", long_fit)
    start = time.perf_counter()
    deadline = time.time() + 600
    demo.train_both(tmp_path / "demo", tmp_path / "data", deadline)
    cores = len(os.sched_getaffinity(0))
    assert seen["extra"][:3] == (
        "--trainer.callbacks+=shared.training.threads.ThreadsFromFile",
        "--trainer.callbacks.path",
        str(stale),
    )
    # each training is bounded by the time left once the stages after it are set aside
    speech_limit, caption_limit = seen["extra"][3:], seen["caption_limit"]
    assert speech_limit[0] == caption_limit[0] == "--trainer.max_time"
    to_seconds = lambda text: sum(int(part) * unit for part, unit in zip(text.split(":"), (86400, 3600, 60, 1)))  # noqa: E731
    assert 600 - demo.AFTER_TRAINING_S - 10 <= to_seconds(speech_limit[1]) <= 600 - demo.AFTER_TRAINING_S
    assert to_seconds(caption_limit[1]) == pytest.approx(to_seconds(speech_limit[1]) - demo.CAPTIONER_AFTER_FIT_S, abs=2)
    assert seen["recognizer"] == [str(max(1, cores // 2)), str(cores)]
    assert time.perf_counter() - start < 25  # handed over when the captioner was done, not at the probe's deadline


def test_demo_asks_for_bf16_only_where_the_cpu_reports_bf16_units(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert demo._bf16_is_fast()
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert not demo._bf16_is_fast()
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")  # a torch without the probe: no bf16, no error
    assert not demo._bf16_is_fast()


def test_a_stopped_lane_starts_no_further_command(tmp_path):
    # The other lane may fail while this one is between two commands: the next one must not start.

    lane = demo.Lane("captioner", tmp_path / "captioner.log", threads=1, max_steps=10, runs=tmp_path / "runs")
    lane.stop()
    marker = tmp_path / "ran"
    with pytest.raises(SystemExit, match="stopped"):
        demo._run([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], lane)
    assert not marker.exists()
