"""Decoding settings compared on dev data: WER per group, their mean, and a paired bootstrap.

    speech-attend tune --model MODEL --devsets DIR [--groups a,b] [--split CORPUS_DIR:dev] \\
        --settings beam_size=24,ctc_weight=0.3 beam_size=48,ctc_weight=0.15 [--lm LM] [--json OUT]

Each setting (``name=value`` pairs of ``beam_size``, ``ctc_weight``, ``lm_weight``,
``length_bonus``; the empty setting ``-`` is the model's own decoding) transcribes every clip of
the groups (default: all of ``devsets.json`` but ``human_alsa``, whose 16 words say little) with
one model and language model. The first setting is the base: each other one gets its mean WER
over the groups and the paired bootstrap interval (1,000 draws of each group's clips, the same
draws for both: :func:`~speech_attend.evaluate.metrics.mean_wer_difference_interval`) of its
mean's difference from the base's. With ``--split DIR:NAME`` (a split of a corpus folder, any
layout ``fit`` reads, e.g. the corpus's dev split) it is scored too, and shown beside the mean;
without ``--devsets`` it is the split alone that the settings are chosen on.

The best setting has the lowest mean WER over the groups (the split's WER without groups), then
the lowest CER, then comes first; the output ends with the ``export`` command that saves it as
the model's default. A group or split whose name says ``test`` is refused: settings chosen on
test make its results optimistic.
"""

from __future__ import annotations

from pathlib import Path

from speech_attend.data.readers import CorpusError, Utterance, read_corpus, read_librispeech
from speech_attend.data.text import normalize_text
from speech_attend.evaluate.evaluate import choose_groups
from speech_attend.evaluate.metrics import char_error_rate, mean_wer, mean_wer_difference_interval, utterance_word_edits
from speech_attend.infer.transcribe import Transcriber

__all__ = ["SETTINGS", "LEFT_OUT", "parse_setting", "word_edits", "tune", "best_of", "report"]

SETTINGS = {"beam_size": int, "ctc_weight": float, "lm_weight": float, "length_bonus": float}
LEFT_OUT = ("human_alsa",)  # 16 words: it says little about a setting
_EXPORT_OPTIONS = {
    "beam_size": "--beam-size",
    "ctc_weight": "--ctc-weight",
    "lm_weight": "--lm-weight",
    "length_bonus": "--length-bonus",
}


def parse_setting(text: str) -> dict:
    """``"beam_size=48,ctc_weight=0.15"`` -> ``{"beam_size": 48, "ctc_weight": 0.15}``; ``"-"`` -> ``{}``."""
    if text.strip() == "-":
        return {}
    setting = {}
    for pair in text.split(","):
        name, _, value = pair.partition("=")
        try:
            if name.strip() not in SETTINGS or not value:
                raise ValueError
            setting[name.strip()] = SETTINGS[name.strip()](value)
        except ValueError:
            raise ValueError(f"--settings {text!r}: expected name=value pairs of {', '.join(SETTINGS)}, or -") from None
    return setting


def word_edits(transcriber: Transcriber, utterances: list[Utterance]) -> tuple[list[int], list[int], float]:
    """Each utterance's word edits and reference words, and the CER (an unreadable file: an empty transcript)."""
    references = [normalize_text(u.text) for u in utterances]
    texts = [
        normalize_text(r.text) if not isinstance(r, ValueError) else ""
        for r in transcriber.transcribe_many([u.audio_path for u in utterances])
    ]
    return utterance_word_edits(references, texts), [len(r.split()) for r in references], char_error_rate(references, texts)


def _refuse_test(names: list[str]) -> None:
    tests = [name for name in names if "test" in name.lower()]
    if tests:
        raise ValueError(
            f"{', '.join(tests)}: refusing to tune on test data; choose the settings on dev, and measure test once after"
        )


def tune(
    model: str,
    settings: list[dict],
    devsets: Path | None = None,
    groups: str | None = None,
    split: str | None = None,
    lm: str | None = None,
    max_utterances: int | None = None,
) -> dict:
    """Score each setting; returns the groups, the split and one row per setting (``setting``, ``wer`` and
    ``cer`` per group, ``mean``, ``difference_95`` from the base, ``split_wer``, ``split_cer``) and the ``best``.

    Raises:
        ValueError: no data, test data, a bad split, or a setting the model cannot take.
    """
    if devsets is None and split is None:
        raise ValueError("expected --devsets DIR or --split DIR:NAME (or both): the dev data to tune on")
    root, _, name = (split or "").rpartition(":")
    _refuse_test([g for g in (groups or "").split(",") if g.strip()] + ([name] if split else []))
    if split and (not root or not name or not Path(root).is_dir()):
        raise ValueError(f"--split {split}: expected DIR:NAME, a corpus folder DIR and its split NAME")
    names = []
    if devsets is not None:
        available = choose_groups(devsets, groups)
        names = available if groups else [g for g in available if g not in LEFT_OUT]
    _refuse_test(names)
    data = {g: read_librispeech(devsets, [g])[:max_utterances] for g in names}
    split_data = read_corpus(root, name)[:max_utterances] if split else None
    if split and not split_data:
        raise CorpusError(f"--split {split}: no utterances")
    rows, base = [], None
    for setting in settings:
        transcriber = Transcriber.load(model, lm=lm, **setting)
        measured = {g: word_edits(transcriber, utterances) for g, utterances in data.items()}
        edits, words = {g: m[0] for g, m in measured.items()}, {g: m[1] for g, m in measured.items()}
        row: dict = {
            "setting": setting,
            "wer": {g: sum(edits[g]) / max(1, sum(words[g])) for g in names},
            "cer": {g: measured[g][2] for g in names},
        }
        if names:
            row["mean"] = mean_wer(edits, words)
            if base is None:
                base = edits
            else:
                row["difference_95"] = list(mean_wer_difference_interval(base, edits, words))
        if split_data is not None:
            e, w, cer = word_edits(transcriber, split_data)
            row["split_wer"], row["split_cer"] = sum(e) / max(1, sum(w)), cer
        rows.append(row)
    return {"groups": names, "split": split, "results": rows, "best": best_of(rows)}


def best_of(rows: list[dict]) -> dict:
    """The lowest mean WER over the groups (the split's WER without groups), then the lowest CER, then the first."""

    def key(indexed):
        index, row = indexed
        if "mean" in row:
            cer = sum(row["cer"].values()) / len(row["cer"])
            return round(row["mean"], 6), round(cer, 6), index
        return round(row["split_wer"], 6), round(row["split_cer"], 6), index

    return min(enumerate(rows), key=key)[1]


def report(results: dict, model: str, lm: str | None = None) -> list[str]:
    """The table of :func:`tune`'s results, the best setting and the command that saves it."""
    groups, split = results["groups"], results["split"]
    lines = [
        "setting".ljust(34)
        + "".join(g[:10].rjust(11) for g in groups)
        + ("       mean  95 % of the difference" if groups else "")
        + ("      split" if split else "")
    ]
    for row in results["results"]:
        low_high = row.get("difference_95")
        interval = f"{low_high[0]:+.4f} .. {low_high[1]:+.4f}" if low_high else "(base)"
        lines.append(
            _name(row["setting"])[:33].ljust(34)
            + "".join(f"{row['wer'][g]:11.4f}" for g in groups)
            + (f" {row['mean']:10.4f}  {interval:<22}" if groups else "")
            + (f" {row['split_wer']:10.4f}" if split else "")
        )
    best = results["best"]
    options = " ".join(f"{_EXPORT_OPTIONS[k]} {v:g}" for k, v in best["setting"].items())
    lines.append(f"best: {_name(best['setting'])}")
    if options:
        bundled = f" --lm {lm}" if lm else ""
        lines.append(f"save it as the default: speech-attend export --ckpt {model} --out DIR{bundled} {options}")
    return lines


def _name(setting: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in setting.items()) or "(the model's)"
