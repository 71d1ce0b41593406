"""The recognizer scored on evaluation groups under conditions: one loop for every measurement.

    speech-attend evaluate --model MODEL --devsets DIR [--groups a,b] [--conditions clean,babble:10,room,level:-50,long]
                           [--beam-size N --lm LM --lm-weight X --length-bonus Y --ctc-weight W] [--by-speaker] [--json OUT]

``DIR`` is the output of ``speech-attend prepare devsets`` (groups listed in ``DIR/devsets.json``),
or any folder of LibriSpeech-layout subsets (a corpus's ``test`` split among them). Each group's
clips are put under each condition (:mod:`speech_attend.evaluate.conditions`: ``clean`` first,
then noise, rooms, offsets, levels, long files), transcribed with
:class:`speech_attend.infer.transcribe.Transcriber` (files decoded together in batches),
references and hypotheses normalised by :func:`speech_attend.data.text.normalize_text`, and
scored with the corpus-level WER and CER (:func:`speech_attend.evaluate.metrics.speech_metrics`).
Each condition's WER is set against the clean one as a ratio with its 95 % paired bootstrap
interval (:func:`~speech_attend.evaluate.metrics.edit_ratio_interval`: the same clips drawn for
both; on 200 clips a ratio of 1.12 is not told from 1.10 when the interval spans both). An
unreadable file counts as an empty transcript. ``timing`` and ``non-speech`` measure word times
and sounds without speech on clips of their own (:mod:`speech_attend.evaluate.word_times`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from speech_attend.data.audio import load_audio
from speech_attend.data.readers import CorpusError, Utterance, read_librispeech
from speech_attend.data.text import normalize_text
from speech_attend.evaluate import word_times
from speech_attend.evaluate.conditions import SAMPLE_RATE, Condition, LongFiles, NonSpeech, WordTimes, apply
from speech_attend.evaluate.devsets import groups_of
from speech_attend.evaluate.engines import voice_of
from speech_attend.evaluate.metrics import edit_ratio_interval, speech_metrics, utterance_word_edits
from speech_attend.infer.transcribe import Transcriber

__all__ = ["choose_groups", "evaluate", "evaluate_group", "report", "write_json"]


def choose_groups(devsets: Path, wanted: str | None) -> list[str]:
    """The groups to score: ``wanted`` (comma-separated) or every group of ``devsets``.

    Raises:
        CorpusError: no such folder, a wanted group it lacks, or no groups at all.
    """
    if not devsets.is_dir():
        raise CorpusError(f"{devsets}: folder of evaluation groups not found")
    groups = groups_of(devsets)
    if wanted:
        names = [g.strip() for g in wanted.split(",") if g.strip()]
        unknown = [g for g in names if g not in groups]
        if unknown:
            raise CorpusError(f"{devsets}: no group(s) {unknown}; it has {groups}")
        groups = names
    if not groups:
        raise CorpusError(f"{devsets}: no evaluation groups (folders with *.trans.txt)")
    return groups


def _transcribe(transcriber: Transcriber, paths: list) -> tuple[list[str], list, int, float]:
    """Normalised texts (an unreadable file: empty), the transcripts, the unreadable count and the seconds taken."""
    start = time.perf_counter()
    results = list(transcriber.transcribe_many(paths))
    texts = ["" if isinstance(r, ValueError) else normalize_text(r.text) for r in results]
    return texts, results, sum(isinstance(r, ValueError) for r in results), time.perf_counter() - start


def _by_speaker(group: str, utterances: list[Utterance], references: list[str], texts: list[str]) -> dict:
    """Each speaker's (for Flite and Festival: each voice's) size and error rates."""
    speakers: dict[str, list[int]] = {}
    for i, u in enumerate(utterances):
        speakers.setdefault(voice_of(group, u.speaker or "") or str(u.speaker), []).append(i)
    return {
        name: {"utterances": len(items), **speech_metrics([references[i] for i in items], [texts[i] for i in items])}
        for name, items in sorted(speakers.items())
    }


def _long_files(
    utterances: list[Utterance], waves: dict[str, torch.Tensor], condition: LongFiles, work: Path
) -> tuple[list[Path], list[list[int]]]:
    """Write each speaker's clips joined ``clips_per_file`` at a time into ``work``; the files and the utterances of each."""
    by_speaker: dict[str, list[int]] = {}
    for i, u in enumerate(utterances):
        by_speaker.setdefault(str(u.speaker), []).append(i)
    paths, files = [], []
    pause = np.zeros(int(condition.pause_s * SAMPLE_RATE), dtype=np.float32)
    for items in by_speaker.values():
        for start in range(0, len(items), condition.clips_per_file):
            chunk = items[start : start + condition.clips_per_file]
            pieces = [part for i in chunk for part in (waves[utterances[i].audio_path].numpy(), pause)][:-1]
            paths.append(work / f"{len(paths):04d}.flac")
            sf.write(paths[-1], np.concatenate(pieces), SAMPLE_RATE, subtype="PCM_16")
            files.append(chunk)
    return paths, files


def evaluate_group(
    transcriber: Transcriber,
    devsets: Path,
    group: str,
    conditions: list[Condition | LongFiles],
    work: Path,
    seed: int = 0,
    by_speaker: bool = False,
) -> dict[str, dict]:
    """One group under each condition (``clean`` first): condition -> size, WER, CER, unreadable and
    empty transcripts, seconds, and with more than one condition the WER ratio to clean and its interval.

    Args:
        transcriber (Transcriber): the model with its decoding.
        devsets (Path): the folder of groups.
        group (str): the group's folder name.
        conditions (list): as :func:`~speech_attend.evaluate.conditions.parse_conditions` gives them, ``clean`` first.
        work (Path): where the changed clips of a condition are written, until they are transcribed.
        seed (int, optional): the draws' seed, the devsets' own for their groups' draws. (Default: ``0``)
        by_speaker (bool, optional): add each speaker's results (``speakers``). (Default: ``False``)
    """
    utterances = read_librispeech(devsets, [group])
    references = [normalize_text(u.text) for u in utterances]
    order = sorted(range(len(utterances)), key=lambda i: Path(utterances[i].audio_path))  # the draws go clip after clip by path
    waves: dict[str, torch.Tensor] = {}
    results, clean_edits = {}, None
    for condition in conditions:
        folder = work / group / f"condition{len(results)}"
        folder.mkdir(parents=True, exist_ok=True)
        if not waves and condition.name != "clean":
            waves = {utterances[i].audio_path: load_audio(utterances[i].audio_path, SAMPLE_RATE) for i in order}
        refs, extra = references, {}
        if isinstance(condition, LongFiles):
            paths, files = _long_files(utterances, waves, condition, folder)
            refs = [" ".join(references[i] for i in chunk) for chunk in files]
        elif condition.change is None:
            paths = [u.audio_path for u in utterances]
        else:
            changed = apply(condition, [waves[utterances[i].audio_path] for i in order], seed)
            paths = [""] * len(utterances)
            for i, wave in zip(order, changed):
                paths[i] = folder / f"{i:05d}{condition.suffix}"
                sf.write(paths[i], wave, SAMPLE_RATE, subtype="PCM_16")
        texts, transcripts, failed, seconds = _transcribe(transcriber, paths)
        shutil.rmtree(folder)  # the changed clips are transcribed: only their scores are kept
        edits = utterance_word_edits(refs, texts)
        if isinstance(condition, LongFiles):
            extra = {
                "files": len(paths),
                "chunks": sum(t.chunks for t in transcripts if not isinstance(t, ValueError)),
                "audio_seconds": round(sum(t.duration_s for t in transcripts if not isinstance(t, ValueError)), 1),
            }
            edits_of_clean = None if clean_edits is None else [sum(clean_edits[i] for i in chunk) for chunk in files]
        else:
            clean_edits = edits if clean_edits is None else clean_edits  # "clean" comes first
            edits_of_clean = clean_edits
        result = {
            "utterances": len(utterances),
            **speech_metrics(refs, texts),
            "failed": failed,
            "empty": sum(not t for t in texts),
            "seconds": round(seconds, 2),
            **extra,
        }
        if len(conditions) > 1:
            defined = edits_of_clean is not None and sum(edits_of_clean) > 0  # no clean error: no ratio
            result["wer_ratio"] = sum(edits) / sum(edits_of_clean) if defined else None
            result["wer_ratio_95"] = list(edit_ratio_interval(edits_of_clean, edits)) if defined else None
        if by_speaker and not isinstance(condition, LongFiles):
            result["speakers"] = _by_speaker(group, utterances, references, texts)
        results[condition.name] = result
    return results


def evaluate(
    transcriber: Transcriber,
    devsets: Path | None,
    groups: list[str],
    conditions: list,
    seed: int = 0,
    by_speaker: bool = False,
) -> dict:
    """Every group under every condition, and the word times and sounds without speech when asked for.

    Returns:
        dict: ``groups`` (group -> condition -> results: :func:`evaluate_group`), and ``timing`` and
        ``non_speech`` (:mod:`speech_attend.evaluate.word_times`) when among ``conditions``.
    """
    on_groups = [c for c in conditions if isinstance(c, (Condition, LongFiles))]
    results: dict = {"groups": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for group in groups if on_groups else []:
            results["groups"][group] = evaluate_group(transcriber, devsets, group, on_groups, Path(tmp), seed, by_speaker)
        for condition in conditions:
            work = Path(tmp) / condition.name.replace(":", "_")
            work.mkdir(parents=True, exist_ok=True)
            if isinstance(condition, WordTimes):
                results["timing"] = word_times.measure(transcriber, work, condition.files, condition.per_file, seed)
            elif isinstance(condition, NonSpeech):
                results["non_speech"] = word_times.non_speech(transcriber, work, list(condition.seconds), seed)
    return results


def report(results: dict) -> list[str]:
    """The table of :func:`evaluate`'s results: a line per group and condition (and speaker), then the times."""
    lines = []
    groups = results["groups"]
    if groups:
        width = max(len(g) for g in groups) + 2
        names = max((len(c) for by in groups.values() for c in by), default=9) + 2
        lines.append(
            f"{'group':<{width}}{'condition':<{names}}{'utts':>6}{'WER':>8}{'CER':>8}{'x clean':>9}{'95 % interval':>16}{'empty':>7}"
        )
        for group, by_condition in groups.items():
            for name, r in by_condition.items():
                ratio, interval = "", ""
                if r.get("wer_ratio") is not None:
                    ratio, interval = f"{r['wer_ratio']:.3f}", "{:.3f}-{:.3f}".format(*r["wer_ratio_95"])
                unreadable = f"  ({r['failed']} unreadable)" if r["failed"] else ""
                lines.append(
                    f"{group:<{width}}{name:<{names}}{r['utterances']:>6}{r['wer']:>8.3f}{r['cer']:>8.3f}"
                    f"{ratio:>9}{interval:>16}{r['empty']:>7}{unreadable}"
                )
                for speaker, s in r.get("speakers", {}).items():
                    lines.append(f"  {speaker:<{width + names - 2}}{s['utterances']:>6}{s['wer']:>8.3f}{s['cer']:>8.3f}")
    return lines + word_times.report(results.get("timing"), results.get("non_speech"))


def write_json(results: dict, out: str) -> None:
    """``results`` as JSON into file ``out`` (``-``: standard output)."""
    text = json.dumps(results, indent=1, ensure_ascii=False)
    if out == "-":
        print(text)
    else:
        Path(out).write_text(text + "\n")
