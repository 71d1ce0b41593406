"""Every evaluation group of the recognizer, built deterministically into one folder.

    python scripts/speech_devsets.py --out DIR [--per-group 200] [--seed 0] [--no-engines]
    python scripts/speech_devsets.py --out DIR --per-group 1000 --seed 7 --espeak-only

Groups (each a LibriSpeech-layout subset ``DIR/<group>/<speaker>/<chapter>/...``, 16 kHz FLAC
with ``trans.txt``, listed with a description in ``DIR/devsets.json``):

- ``espeak_unseen``: new sentences (the WordNet dev split, never in training), eSpeak voices and
  variants never heard in training;
- ``piper_unseen``: new sentences, the piper voice at pitch and formant shifts never used in
  training (skipped, with a note, when piper is not installed);
- ``flite``, ``festival``: engines never used for training (``scripts/engine_devset.py``;
  skipped, with a note, when the Debian packages are missing, or with ``--no-engines``);
- ``espeak_babble10``: the clips of ``espeak_unseen`` with babble of 3 to 7 of the others at 10 dB SNR;
- ``espeak_reverb``: the clips of ``espeak_unseen`` in simulated rooms (RT60 0.3 to 0.8 s);
- ``human_alsa``: human speech, the 8 spoken clips of alsa-utils' speaker test (one woman: "front
  left", "rear center" and the like; a real recording found in a package, so evaluation only),
  their words taken from their file names (skipped, with a note, when alsa-utils is missing).

Score a model on all of them with ``scripts/eval_speech.py --ckpt CKPT --devsets DIR``.

``--espeak-only`` writes ``espeak_unseen`` alone: a larger group of it (another seed, so other
clips) tells ratios apart that 200 clips cannot (``scripts/recording_check.py``'s -50 dB against
clean: a 95 % interval about 0.07 wide at 1,000 clips, 0.18 at 200).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import engine_devset  # noqa: E402
from speech_attend.data.audio import load_audio  # noqa: E402
from speech_attend.data.augment import add_noise, babble, reverberate, room_impulse_response  # noqa: E402
from speech_attend.builtin.piper_voice import missing_packages  # noqa: E402
from speech_attend.builtin.corpus import prepare_synth  # noqa: E402

SAMPLE_RATE = 16000
_SEED_OFFSET = 1000  # the groups' utterance draws differ from those of a corpus's own dev split
_BABBLE_SNR_DB = 10.0
_RT60 = (0.3, 0.8)
_DIRECT_TO_REVERB_DB = (0.0, 6.0)
_MAX_PEAK = 0.98
ALSA_SOUNDS = Path("/usr/share/sounds/alsa")  # alsa-utils' speaker-test clips
_ALSA_CLIPS = ["Front_Left", "Front_Center", "Front_Right", "Rear_Left", "Rear_Center", "Rear_Right", "Side_Left", "Side_Right"]


def _spoken_group(out: Path, name: str, engine: str, count: int, seed: int) -> None:
    """The dev split of a one-engine WordNet corpus, moved to ``out/name``."""
    work = out / f".work-{name}"
    prepare_synth(work, train=0, dev=count, test=0, seed=seed + _SEED_OFFSET, progress=False, text="wordnet", engines=(engine,))
    shutil.rmtree(out / name, ignore_errors=True)
    (work / "dev").rename(out / name)
    shutil.rmtree(work)


def _derived_group(out: Path, source: str, name: str, seed: int, condition) -> None:
    """A copy of group ``source`` with ``condition(wave, others, generator)`` applied to each clip."""
    shutil.rmtree(out / name, ignore_errors=True)
    shutil.copytree(out / source, out / name, ignore=shutil.ignore_patterns("*.flac"))
    clips = sorted((out / source).rglob("*.flac"))
    waves = [load_audio(path, SAMPLE_RATE) for path in clips]
    generator = torch.Generator().manual_seed(seed)
    for i, (path, wave) in enumerate(zip(clips, waves)):
        others = waves[:i] + waves[i + 1:]
        changed = condition(wave, others, generator).numpy()
        peak = float(np.abs(changed).max())
        if peak > _MAX_PEAK:
            changed = changed * (_MAX_PEAK / peak)
        sf.write(out / name / path.relative_to(out / source), changed, SAMPLE_RATE, format="FLAC", subtype="PCM_16")


def _human_group(out: Path, name: str, sounds: Path) -> bool:
    """alsa-utils' spoken clips in ``sounds`` as group ``name`` (one speaker), each clip's words its
    file name's (``Front_Left.wav``: "FRONT LEFT"); False, writing nothing, when any is missing."""
    clips = [sounds / f"{clip}.wav" for clip in _ALSA_CLIPS]
    if not all(path.is_file() for path in clips):
        return False
    chapter = out / name / "1" / "1"
    shutil.rmtree(out / name, ignore_errors=True)
    chapter.mkdir(parents=True)
    lines = []
    for i, path in enumerate(clips):
        utterance = f"1-1-{i:04d}"
        sf.write(chapter / f"{utterance}.flac", load_audio(path, SAMPLE_RATE).numpy(), SAMPLE_RATE, format="FLAC", subtype="PCM_16")
        lines.append(f"{utterance} {path.stem.replace('_', ' ').upper()}")
    (chapter / "1-1.trans.txt").write_text("\n".join(lines) + "\n")
    return True


def _with_babble(wave: torch.Tensor, others: list[torch.Tensor], generator: torch.Generator,
                 snr_db: float = _BABBLE_SNR_DB) -> torch.Tensor:
    talkers = 3 + int(torch.randint(5, (), generator=generator))  # 3 to 7
    chosen = [others[int(j)] for j in torch.randint(len(others), (talkers,), generator=generator)]
    return add_noise(wave, babble(chosen, wave.numel(), generator), snr_db, SAMPLE_RATE)


def _in_a_room(wave: torch.Tensor, others: list[torch.Tensor], generator: torch.Generator) -> torch.Tensor:
    def draw(low_high):
        return low_high[0] + (low_high[1] - low_high[0]) * float(torch.rand((), generator=generator))

    rir = room_impulse_response(draw(_RT60), draw(_DIRECT_TO_REVERB_DB), SAMPLE_RATE, generator)
    wet = reverberate(wave, rir)
    return wet * (wave.abs().max() / wet.abs().max().clamp_min(1e-9))  # the clip's own peak level


def build(out: Path, per_group: int, seed: int, engines: bool = True, human: Path | None = ALSA_SOUNDS,
          espeak_only: bool = False) -> dict[str, str]:
    """Write every group into ``out``; returns name -> description (also in ``out/devsets.json``).
    ``human`` is the folder of alsa-utils' speaker-test clips (None: no ``human_alsa`` group);
    ``espeak_only`` writes ``espeak_unseen`` alone."""
    engine_devset.check_output_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    groups = {}
    _spoken_group(out, "espeak_unseen", "espeak", per_group, seed)
    groups["espeak_unseen"] = "new sentences, eSpeak voices and variants never heard in training"
    if espeak_only:
        engine_devset.mark(out, groups)
        return groups
    if missing_packages():
        print(f"piper_unseen skipped: piper needs {', '.join(missing_packages())}")
    else:
        _spoken_group(out, "piper_unseen", "piper", per_group, seed)
        groups["piper_unseen"] = "new sentences, the piper voice at pitch and formant shifts never used in training"
    engine_devset.mark(out, groups)  # marked before the engine groups, so prepare_synth refuses the folder
    if engines:
        try:
            groups.update(engine_devset.build(out, ["flite", "festival"], per_group, seed))
        except engine_devset.EngineMissing as err:
            print(f"flite and festival skipped: {err}")
    if len(list((out / "espeak_unseen").rglob("*.flac"))) > 1:
        _derived_group(out, "espeak_unseen", "espeak_babble10", seed, _with_babble)
        groups["espeak_babble10"] = "espeak_unseen with babble of 3 to 7 other clips at 10 dB SNR"
        _derived_group(out, "espeak_unseen", "espeak_reverb", seed + 1, _in_a_room)
        groups["espeak_reverb"] = "espeak_unseen in simulated rooms, RT60 0.3 to 0.8 s"
    if human is not None:
        if _human_group(out, "human_alsa", human):
            groups["human_alsa"] = "human speech: alsa-utils' 8 speaker-test clips (one woman, 'front left' and the like)"
        else:
            print(f"human_alsa skipped: no alsa-utils speaker-test clips in {human} (apt-get install alsa-utils)")
    engine_devset.mark(out, groups)
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="output folder (evaluation sets only)")
    parser.add_argument("--per-group", type=int, default=200, help="utterances per group (default: 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-engines", action="store_true", help="leave out the Flite and Festival groups")
    parser.add_argument("--espeak-only", action="store_true", help="write espeak_unseen alone (a larger group of it)")
    args = parser.parse_args(argv)
    if args.per_group < 1:
        print(f"speech_devsets: error: --per-group must be at least 1, got {args.per_group}", file=sys.stderr)
        return 2
    try:
        groups = build(args.out, args.per_group, args.seed, engines=not args.no_engines, espeak_only=args.espeak_only)
    except (ValueError, RuntimeError, OSError) as err:
        print(f"speech_devsets: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    for name, description in groups.items():
        print(f"{args.out / name}: {description}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
