"""What a CPU training gains from a second thread handed to it while it runs (``make demo``'s
hand-over between its two lanes).

    python -m scripts.benchmarks.threads [--data data/synth] [--steps 700] [--switch-after 70] [--modes one,two,file,pinned]

Fits the demo recognizer (``configs/speech_attend/demo.yaml``, no validation) once per mode and
reports the seconds of its second epoch, which starts after the switch:

* ``one``: one thread throughout;
* ``two``: two threads from the start;
* ``file``: one thread, then ``ThreadsFromFile`` (:mod:`shared.training.threads`) is told 2 after ``--switch-after`` seconds (the demo's way);
* ``pinned``: pinned to one core with one thread, then allowed every core after ``--switch-after``
  seconds; the threads follow only if the training sets them, so this mode sets them through the
  file as well. It shows why the demo does not pin: OpenMP counts the cores when torch loads.

The modes run one after the other; run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = ("one", "two", "file", "pinned")


def epoch_seconds(log: str, epoch: int) -> float | None:
    """The elapsed time of ``epoch``'s finished progress bar (``[MM:SS<``), or ``None``."""
    found = re.findall(rf"Epoch {epoch}: 100%\|[^|]*\|\s*\d+/\d+ \[(\d+):(\d\d)<", log)
    return None if not found else int(found[-1][0]) * 60 + int(found[-1][1])


def run(mode: str, data: Path, steps: int, switch_after: float, work: Path) -> float | None:
    """One fit in ``mode``; the seconds of its second epoch."""
    threads_file = work / f"{mode}.threads"
    args = [
        sys.executable,
        "-m",
        "speech_attend.cli",
        "fit",
        "--config",
        "configs/speech_attend/demo.yaml",
        "--data.data_dir",
        str(data),
        "--trainer.max_steps",
        str(steps),
        "--trainer.default_root_dir",
        str(work / mode),
        "--trainer.check_val_every_n_epoch",
        "1000",
        "--trainer.callbacks+=shared.training.threads.ThreadsFromFile",
        "--trainer.callbacks.path",
        str(threads_file),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "2" if mode == "two" else "1"}
    log_path = work / f"{mode}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        every_core = os.sched_getaffinity(0)
        if mode == "pinned":
            os.sched_setaffinity(process.pid, {min(every_core)})
        if mode in ("file", "pinned"):
            try:
                process.wait(timeout=switch_after)
            except subprocess.TimeoutExpired:
                if mode == "pinned":
                    os.sched_setaffinity(process.pid, every_core)
                threads_file.write_text(f"{len(every_core)}\n")
        if process.wait() != 0:
            raise SystemExit(f"bench_threads: the {mode} fit failed; its log: {log_path}")
    return epoch_seconds(log_path.read_text(errors="replace"), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "synth", help="the demo's speech corpus")
    parser.add_argument("--steps", type=int, default=700, help="training steps per fit (the second epoch must end)")
    parser.add_argument("--switch-after", type=float, default=70.0, help="seconds before the second thread is handed over")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; expected some of {', '.join(MODES)}")
    if not (args.data / "train").is_dir():
        parser.error(
            f"{args.data}: no speech corpus (expected {args.data}/train); make it with "
            f"`speech-attend prepare synth --out {args.data}` or `make demo`"
        )
    if not hasattr(os, "sched_setaffinity"):
        parser.error("needs Linux: the pinned mode sets which cores a process may use (sched_setaffinity)")
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("this machine lets the process use one core; the comparison needs two")
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as folder:
        for mode in modes:
            start = time.perf_counter()
            seconds = run(mode, args.data.resolve(), args.steps, args.switch_after, Path(folder))
            shown = "not reached (raise --steps)" if seconds is None else f"{seconds:.0f} s"
            print(f"{mode:>7}: second epoch {shown}  (fit {time.perf_counter() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
