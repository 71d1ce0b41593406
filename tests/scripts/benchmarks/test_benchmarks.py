"""The benchmarks (scripts/benchmarks/): the FLOP count behind their ceiling column, their commands, and the GPU check's loss test."""

import pytest
import torch

from scripts.benchmarks import against, captioner, recognizer, threads, transcribe
from scripts.benchmarks.common import matmul_gflop
from scripts.gpu import loss_fell
from speech_attend.model.las import native_cpu_kernels


def test_matmul_gflop_counts_two_flops_per_multiply_add():
    a, b = torch.randn(30, 40), torch.randn(40, 50)
    assert matmul_gflop(lambda: a @ b) == 2 * 30 * 40 * 50 / 1e9


def test_matmul_gflop_counts_the_recurrent_products_of_native_lstms():
    # The recognizer's listener runs PyTorch's native CPU LSTM: its products must be counted, or
    # the recognizer's ceiling would be too high.
    lstm, cell = torch.nn.LSTM(48, 16, batch_first=True), torch.nn.LSTMCell(48, 16)
    x = torch.randn(3, 7, 48)
    with torch.no_grad(), native_cpu_kernels():
        assert matmul_gflop(lambda: lstm(x)) == 2 * 3 * 7 * (48 + 16) * 4 * 16 / 1e9
        assert matmul_gflop(lambda: cell(x[:, 0])) == 2 * 3 * (48 + 16) * 4 * 16 / 1e9


def test_loss_fell_reads_a_run_s_metrics_csv(tmp_path, capsys):
    run = tmp_path / "run" / "version_0"
    run.mkdir(parents=True)
    rows = "\n".join(f"0,{step},{4.0 - step * 0.3:.2f}" for step in range(10))
    (run / "metrics.csv").write_text("epoch,step,train/loss\n" + rows + "\n")
    assert loss_fell.main([str(tmp_path / "run")]) == 0
    assert "OK" in capsys.readouterr().out
    (run / "metrics.csv").write_text("epoch,step,train/loss\n" + "\n".join(f"0,{s},3.0" for s in range(10)) + "\n")
    assert loss_fell.main([str(tmp_path / "run")]) == 1


def test_app_benchmarks_pass_against_and_rounds_to_the_side_by_side_bench(monkeypatch, capsys):
    # scripts.benchmarks.captioner and .recognizer --against REV are the commands docs/BENCHMARKS.md gives;
    # they must run the side-by-side benchmark of their own app with the rounds asked for.
    calls = []

    def fake_compare(app, revision, quick=False, rounds=5):
        calls.append((app, revision, quick, rounds))
        return {"app": app, "revision": revision}

    monkeypatch.setattr(against, "compare", fake_compare)
    assert captioner.main(["--against", "abc123", "--rounds", "7", "--json"]) == 0
    assert recognizer.main(["--against", "abc123", "--quick", "--json"]) == 0
    assert calls == [("captioner", "abc123", False, 7), ("recognizer", "abc123", True, 5)]
    assert '"app": "captioner"' in capsys.readouterr().out


def test_the_recognizer_benchmark_times_its_front_end_and_both_mel_powers():
    tiny = recognizer.BenchConfig(batch=2, min_frames=50, max_frames=80)
    result = recognizer.frontend_benchmark(tiny, torch.device("cpu"), rounds=2)
    assert set(result) == {"frontend_seconds", "mel_power_re2_im2_seconds", "mel_power_torchaudio_seconds"}
    assert all(seconds > 0 for seconds in result.values())


def test_side_by_side_bench_refuses_zero_rounds_in_one_line():
    with pytest.raises(SystemExit, match="--rounds must be at least 1, got 0"):
        against.compare("captioner", "HEAD", rounds=0)


def test_the_transcribe_benchmark_times_the_whole_command_and_the_decode_of_each_beam(tmp_path, capsys):
    import json

    import soundfile as sf

    from shared.io.model_files import export_folder
    from speech_attend.model.las import build_recognizer
    from tests.helpers import TINY_SPEECH_CONFIG

    config = {
        "vocabulary": list("abcdefghijklmnopqrstuvwxyz' "),
        "las": TINY_SPEECH_CONFIG["model"]["las"],
        "decoding": {"beam_size": 1, "max_len_ratio": 0.2},
        "features": {},
    }
    export_folder(
        tmp_path / "model", "speech-attend", build_recognizer(config).state_dict(), config
    )  # untrained: the timing is the point
    clip = tmp_path / "clip.wav"
    sf.write(clip, 0.1 * torch.randn(8000).numpy(), 16000)
    audio = transcribe.ten_second_file(tmp_path / "ten.wav", [clip, clip])
    wave, rate = sf.read(audio)
    assert rate == 16000 and len(wave) == 160000  # exactly 10 s, the clips repeated
    assert (
        transcribe.main(["--ckpt", str(tmp_path / "model"), "--file", str(audio), "--beams", "1,2", "--runs", "1", "--json"]) == 0
    )
    results = json.loads(capsys.readouterr().out)
    assert list(results["beams"]) == ["1", "2"]
    for r in results["beams"].values():
        assert len(r["command"]) == 1 and r["command_median"] > r["decode_median"] > 0  # the command adds start-up
        assert r["under_target"] == (r["command_median"] < 3.0)
    assert transcribe.main(["--beams", "0"]) == 2 and "--beams" in capsys.readouterr().err


def test_the_threads_benchmark_reads_an_epochs_seconds_from_the_progress_bar():
    log = (
        "Epoch 0: 100%|##########| 250/250 [00:49<00:00, 5.1it/s]\rEpoch 1:  50%|#####| 125/250 [00:20<00:20]"
        "\rEpoch 1: 100%|##########| 250/250 [01:04<00:00, 3.9it/s, v_num=0]\rEpoch 2:   0%|"
    )
    assert threads.epoch_seconds(log, 0) == 49
    assert threads.epoch_seconds(log, 1) == 64
    assert threads.epoch_seconds(log, 2) is None


def test_the_threads_benchmark_refuses_a_missing_corpus_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        threads.main(["--data", str(tmp_path / "nowhere"), "--modes", "one"])
    assert stopped.value.code == 2
    assert "no speech corpus" in capsys.readouterr().err
