"""scripts/benchmarks/peers.py: one normaliser for every system, and the runner end to end on two tiny groups."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.benchmarks import peers
from speech_attend.evaluate.devsets import groups_of

ROOT = Path(__file__).resolve().parents[3]
SHIPPED_CLIPS = ROOT / "tests" / "data" / "shipped"
MODEL = ROOT / "models" / "speech_attend"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I have 10 cats.", "i have ten cats"),
        ("It cost $2.50, 10% off!", "it cost two dollars fifty ten percent off"),
        ("1,000 people", "one thousand people"),
        ("2.5 kilos", "two point five kilos"),
        ("the 3rd, 1st and 22nd", "the third first and twenty second"),
        ("In 1948 and in the 1990s", "in nineteen forty eight and in the nineteen nineties"),
        ("twenty-one well-known words", "twenty one well known words"),
        ("Don\u2019t STOP -- the caf\u00e9's open!", "don't stop the caf\u00e9's open"),
        ("TEN, ELEVEN; twelve?", "ten eleven twelve"),
    ],
)
def test_normaliser_spells_numbers_and_drops_punctuation(text, expected):
    assert peers.normalize_for_scoring(text) == expected


def test_digits_and_words_score_the_same():
    assert peers.normalize_for_scoring("Room 21, floor 3.") == peers.normalize_for_scoring("ROOM TWENTY-ONE FLOOR THREE")


@pytest.fixture
def tiny_devsets(tmp_path) -> Path:
    """A group of one shipped clip each (eSpeak, piper, a person), in LibriSpeech layout, listed in devsets.json."""
    expected = json.loads((SHIPPED_CLIPS / "expected.json").read_text())["references"]
    groups = {}
    for clip, text in expected.items():
        group, utt = clip.removesuffix(".flac").rsplit("_", 1)  # "espeak_unseen", "1000-2-0000"
        speaker, chapter, _ = utt.split("-")
        folder = tmp_path / group / speaker / chapter
        folder.mkdir(parents=True)
        shutil.copy(SHIPPED_CLIPS / clip, folder / f"{utt}.flac")
        (folder / f"{speaker}-{chapter}.trans.txt").write_text(f"{utt} {text.upper()}\n")
        groups[group] = "a shipped clip"
    (tmp_path / "devsets.json").write_text(json.dumps({"groups": groups}))
    return tmp_path


def test_runner_scores_every_group_with_every_system(tiny_devsets, tmp_path, capsys):
    out = tmp_path / "peers.json"
    code = peers.main(
        [
            "--devsets",
            str(tiny_devsets),
            "--systems",
            "attend,whisper,pocketsphinx",
            "--ckpt",
            str(MODEL),
            "--json",
            str(out),
            "--markdown",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "skipping" not in captured.err  # every system ran: none skipped for a missing package
    record = json.loads(out.read_text())
    groups = groups_of(tiny_devsets)
    assert sorted(record["groups"]) == sorted(groups) and len(groups) == 3
    for group in groups:
        result = record["groups"][group]
        assert result["utterances"] == 1 and result["audio_seconds"] > 0
        assert sorted(result["systems"]) == ["attend", "pocketsphinx", "whisper"]
        for system in result["systems"].values():
            assert math.isfinite(system["wer"]) and math.isfinite(system["cer"])
            assert system["rtf"] > 0 and system["decode_seconds"] > 0
            assert system["failed"] == 0
    assert record["machine"]["cpu_count"] >= 1 and "processor" in record["machine"] and record["date"]
    assert record["command"].startswith("python -m scripts.benchmarks.peers --devsets")
    assert "higher is faster" in captured.out
    table_rows = [line for line in captured.out.splitlines() if line.startswith("| `")]
    assert [row.split("|")[1].strip(" `") for row in table_rows] == groups


def test_unknown_system_is_a_one_line_error(tiny_devsets):
    run = subprocess.run(
        [sys.executable, "-m", "scripts.benchmarks.peers", "--devsets", str(tiny_devsets), "--systems", "attend,wav2letter"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1 and "wav2letter" in run.stderr
    assert run.stdout == ""


def test_missing_group_is_a_one_line_error(tiny_devsets, capsys):
    assert peers.main(["--devsets", str(tiny_devsets), "--groups", "nowhere"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_system_without_its_package_is_skipped_with_what_to_install(tiny_devsets, capsys, monkeypatch):
    real = peers.importlib.util.find_spec
    monkeypatch.setattr(peers.importlib.util, "find_spec", lambda name: None if name == "pocketsphinx" else real(name))
    assert peers.main(["--devsets", str(tiny_devsets), "--systems", "pocketsphinx"]) == 2  # nothing left to run
    err = capsys.readouterr().err
    assert "pip install pocketsphinx" in err and "Traceback" not in err


def test_limit_scores_only_the_first_clips_of_each_group(tiny_devsets, tmp_path, capsys):
    # both clips in one group: --limit 1 keeps the reader's first
    both = tmp_path / "both"
    for group in groups_of(tiny_devsets):
        shutil.copytree(tiny_devsets / group, both / "one", dirs_exist_ok=True)
    out = tmp_path / "peers.json"
    assert peers.main(["--devsets", str(both), "--systems", "pocketsphinx", "--limit", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["groups"]["one"]["utterances"] == 1
    assert peers.main(["--devsets", str(both), "--systems", "pocketsphinx", "--limit", "0"]) == 2
    assert "--limit must be at least 1, got 0" in capsys.readouterr().err
