"""The demo's two lanes: both apps train at the same time, each on half of the CPU cores.

A :class:`Lane` runs one app's commands with its share of the threads, writes their output to a
log file instead of the terminal, and says what it is doing (for a training: its step, read from
the run's own ``metrics.csv``). When one lane is done, :meth:`Lane.widen` hands its cores to the
other: torch can change its intra-op threads at any time, but only from inside the process, so
the lane's training loads the product's
:class:`~shared.training.threads.ThreadsFromFile`, which reads the wanted count from a file
(docs/BENCHMARKS.md, "The demo in 10 minutes").
"""

from __future__ import annotations

import csv
import os
import subprocess
import time
from pathlib import Path

__all__ = ["Lane", "steps_done"]


def steps_done(runs: Path, since: float = 0.0) -> int | None:
    """The training steps a run under ``runs`` has logged, read from its ``metrics.csv``.

    The run is the ``version_N`` whose ``metrics.csv`` changed last, if that was at ``since`` (a
    ``time.time()``) or later; ``None`` when there is none yet. The apps' logger appends a row and
    syncs it every ``trainer.log_every_n_steps`` steps (:mod:`shared.training.run_logger`), so the
    count lags the training by less than that. A training row's ``step`` is the index of the step
    just taken, counted from 0.

    Args:
        runs (Path): the trainings' root, ``trainer.default_root_dir``.
        since (float, optional): older files are an earlier run's. (Default: ``0.0``)
    """
    found = []
    for path in runs.glob("version_*/metrics.csv"):
        try:
            changed = path.stat().st_mtime
        except FileNotFoundError:  # replaced while we looked (a wider header)
            continue
        if changed >= since - 1.0:  # a file's time comes from a coarser clock than time.time()
            found.append((changed, path))
    if not found:
        return None
    try:
        text = max(found)[1].read_text(errors="replace")
    except FileNotFoundError:
        return None
    text = text[: text.rfind("\n") + 1]  # a row being appended counts once it is whole
    steps = [int(row["step"]) + 1 for row in csv.DictReader(text.splitlines()) if row.get("train/loss") and row.get("step")]
    return max(steps, default=None)


class Lane:
    """One app's share of the machine while both train: its commands run with ``threads``
    threads each and write to ``log`` instead of the terminal.

    Args:
        name (str): the app, as the progress line says it.
        log (Path): where its commands' output goes.
        threads (int): OpenMP threads of its commands.
        max_steps (int): the training's steps, for the progress line.
        runs (Path): where its training's runs go (``trainer.default_root_dir``), for the progress line.
    """

    def __init__(self, name: str, log: Path, threads: int, max_steps: int, runs: Path):
        self.name, self.log, self.max_steps, self.threads, self.runs = name, log, max_steps, threads, runs
        self.threads_file = log.with_suffix(".threads")  # read by the lane's training at every step
        self.command = "waiting"
        self.began = time.time()  # when the running command started (a run's files from before are not its)
        self.stopped = False
        self.process: subprocess.Popen | None = None
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        self.threads_file.unlink(missing_ok=True)

    @property
    def env(self) -> dict[str, str]:
        """The environment of the lane's commands: its threads."""
        return {**os.environ, "OMP_NUM_THREADS": str(self.threads)}

    def fit_options(self) -> tuple[str, ...]:
        """What a training in this lane is given so that :meth:`widen` reaches it while it runs."""
        return (
            "--trainer.callbacks+=shared.training.threads.ThreadsFromFile",
            "--trainer.callbacks.path",
            str(self.threads_file),
        )

    def widen(self, threads: int) -> None:
        """More threads for the lane (the other one is done): its running training takes them at
        its next step, its later commands from their start."""
        self.threads = threads
        written = self.threads_file.with_suffix(".threads.new")
        written.write_text(f"{threads}\n")
        written.replace(self.threads_file)  # whole, so a training never reads it half-written

    def progress(self) -> str:
        """What the lane is doing; for a training, its step from the run's ``metrics.csv``."""
        if self.command != "fit":
            return self.command
        done = steps_done(self.runs, since=self.began)
        return "fit: starting" if done is None else f"fit: step {min(done, self.max_steps)}/{self.max_steps}"

    def begin(self, command: str) -> None:
        """Say which command the lane runs next; a stopped lane (the other one failed) starts none."""
        if self.stopped:
            raise SystemExit(f"demo: the {self.name} was stopped")
        self.command, self.began = command, time.time()

    def stop(self) -> None:
        """Stop the running command (a training saves its checkpoint on SIGTERM)."""
        self.stopped = True
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
