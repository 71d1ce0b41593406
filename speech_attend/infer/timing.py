"""When each segment and word was said, and how sure the model was of it.

``transcribe`` cuts audio at its pauses into chunks; each chunk becomes a :class:`Segment`
whose start and end are the chunk's own (trimmed to its speech), and whose words take their
times from one of two alignments of the characters the model chose:

- ``attention``: each character sits at the listener frame its attention weights peak on,
  kept in order (a character never before the one it follows); a word starts at the start of
  its first character's frame and ends at the end of its last character's frame.
- ``ctc`` (models with a CTC head): the chosen characters are force-aligned through the CTC
  head's posteriors: the most probable CTC path that spells exactly those characters (Viterbi
  over the CTC lattice of blanks and labels, Graves et al. 2006). A word starts at the first
  slot that emits its first character and ends after the last slot of its last character.

``Word.start``/``Word.end`` are the ``ctc`` times where there is a CTC head (what
``speech-attend evaluate --conditions timing`` found closer to the true times, docs/BENCHMARKS.md), the
``attention`` times otherwise; both stay in :attr:`Word.attention` and :attr:`Word.ctc`.

Confidence is the mean log-probability of a word's (or a segment's) characters under the
speller, as the beam search scored them (0 is certain; -0.7 is a geometric mean probability
of one half), and, with a CTC head, the mean log-posterior of its characters at their most
probable slot of the forced alignment. A chunk is *no speech* when the CTC head hears almost none
of the characters the speller wrote (its best path, repeats merged and blanks dropped, holds fewer
than ``NO_SPEECH_CTC_SHARE`` of them; none at all for a short transcript) or, without a CTC head,
when the speller's confidence is under ``NO_SPEECH_CONFIDENCE``; such a segment keeps no words.
An attention speller can spell words over a tone or a hum; the CTC head, whose every character
is tied to a frame, hears next to nothing there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = [
    "Word",
    "Segment",
    "ctc_forced_align",
    "token_slots",
    "attention_frames",
    "chunk_segment",
    "no_speech_segment",
    "ctc_best_path_characters",
    "NO_SPEECH_CONFIDENCE",
    "NO_SPEECH_CTC_SHARE",
]

# Without a CTC head, a chunk whose characters average a log-probability under this is taken
# for no speech: a speller that reads speech is far surer of most of its characters.
NO_SPEECH_CONFIDENCE = -1.5
# With a CTC head, a chunk whose CTC best path holds fewer than this share of the speller's
# characters is taken for no speech: the speller is writing what the frames do not hold.
NO_SPEECH_CTC_SHARE = 0.15


@dataclass
class Word:
    """One word of a segment, times in seconds from the start of the file.

    Attributes:
        text (str): the word.
        start (float), end (float): its time, from the CTC alignment where there is one, else
            from the attention.
        confidence (float): mean log-probability of its characters under the speller.
        attention (tuple of float): ``(start, end)`` from the attention alignment.
        ctc (tuple of float or None): ``(start, end)`` from the CTC alignment.
        ctc_confidence (float or None): mean CTC log-posterior of its characters.
    """

    text: str
    start: float
    end: float
    confidence: float
    attention: tuple[float, float]
    ctc: tuple[float, float] | None = None
    ctc_confidence: float | None = None

    def to_json(self) -> dict:
        return {
            "word": self.text,
            "start": _r(self.start),
            "end": _r(self.end),
            "confidence": _r(self.confidence),
            "ctc_confidence": _r(self.ctc_confidence),
            "attention": [_r(t) for t in self.attention],
            "ctc": None if self.ctc is None else [_r(t) for t in self.ctc],
        }


@dataclass
class Segment:
    """One chunk of a file, as ``transcribe`` cut it at its pauses.

    Attributes:
        start (float), end (float): seconds from the start of the file.
        text (str): its transcript; empty when it holds no speech.
        words (list[Word]): its words; none when it holds no speech.
        confidence (float or None): mean log-probability of its characters (``None``: not decoded).
        ctc_confidence (float or None): mean CTC log-posterior of its characters.
        no_speech (bool): silence (never decoded) or what the model scores as no speech.
    """

    start: float
    end: float
    text: str
    words: list[Word] = field(default_factory=list)
    confidence: float | None = None
    ctc_confidence: float | None = None
    no_speech: bool = False

    def to_json(self) -> dict:
        return {
            "start": _r(self.start),
            "end": _r(self.end),
            "text": self.text,
            "no_speech": self.no_speech,
            "confidence": _r(self.confidence),
            "ctc_confidence": _r(self.ctc_confidence),
            "words": [w.to_json() for w in self.words],
        }


def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)


def ctc_forced_align(log_probs: torch.Tensor, tokens: list[int], blank: int = 0) -> torch.Tensor | None:
    """The most probable CTC path that spells exactly ``tokens`` (Viterbi over the CTC lattice).

    The lattice has ``S = 2U + 1`` states, ``blank y_1 blank y_2 ... y_U blank``; a path stays
    in its state, moves to the next, or skips a blank between two different labels, and ends
    in one of the last two states. The same path as ``torchaudio.functional.forced_align``.

    Args:
        log_probs (torch.Tensor): CTC log-probabilities `(T, V)`.
        tokens (list[int]): the labels, none of them ``blank``.
        blank (int, optional): the blank id. (Default: ``0``)

    Returns:
        torch.Tensor or None: the label of each slot `(T,)` (``blank`` or a token id), or
        ``None`` when ``T`` slots cannot hold the tokens (each repeat needs a blank between).
    """
    steps, count = log_probs.size(0), len(tokens)
    repeats = sum(a == b for a, b in zip(tokens, tokens[1:]))
    if steps < count + repeats or steps == 0:
        return None
    lp = log_probs.detach().double().cpu().numpy()  # numpy: a step costs microseconds, not a tensor op's overhead
    labels = np.full(2 * count + 1, blank, dtype=np.int64)
    labels[1::2] = tokens
    emit = lp[:, labels]  # (T, S): each state's label at each slot
    can_skip = np.zeros(labels.size, dtype=bool)
    can_skip[2:] = (labels[2:] != blank) & (labels[2:] != labels[:-2])  # y_{i-1} -> y_i over no blank
    alpha = np.full(labels.size, -np.inf)
    alpha[0] = emit[0, 0]
    if count:
        alpha[1] = emit[0, 1]
    back = np.zeros((steps, labels.size), dtype=np.int64)  # 0 stay, 1 from the previous state, 2 skip
    moves = np.full((3, labels.size), -np.inf)
    for t in range(1, steps):
        moves[0] = alpha
        moves[1, 1:] = alpha[:-1]
        moves[2, 2:] = np.where(can_skip[2:], alpha[:-2], -np.inf)
        back[t] = moves.argmax(0)
        alpha = moves[back[t], np.arange(labels.size)] + emit[t]
    ends = [labels.size - 1] + ([labels.size - 2] if count else [])
    state = max(ends, key=lambda s: alpha[s])
    if not np.isfinite(alpha[state]):
        return None
    path = np.empty(steps, dtype=np.int64)
    for t in range(steps - 1, -1, -1):
        path[t] = labels[state]
        state -= back[t, state]
    return torch.from_numpy(path)


def token_slots(path: torch.Tensor, blank: int = 0) -> list[tuple[int, int]]:
    """Each token's ``(first, last)`` slot in a CTC path `(T,)` from :func:`ctc_forced_align`.

    A token is a run of one label; two equal tokens in a row are always parted by a blank.
    """
    slots: list[tuple[int, int]] = []
    previous = blank
    for t, label in enumerate(path.tolist()):
        if label != blank and label == previous:
            slots[-1] = (slots[-1][0], t)
        elif label != blank:
            slots.append((t, t))
        previous = label
    return slots


def attention_frames(attention: torch.Tensor, frames: int) -> list[int]:
    """The listener frame each character attends to most `(U, L)` -> ``U`` frames, in order.

    A character's frame is never before the previous character's (a running maximum): the
    characters of speech come in time order even where a weight peak jumps back.
    """
    peaks = attention[:, :frames].float().argmax(-1)  # (U,)
    return peaks.cummax(0).values.tolist() if peaks.numel() else []


def _word_spans(labels: list[str]) -> list[tuple[int, int]]:
    """``(first, last)`` character index of each word; words are parted by spaces."""
    spans, first = [], None
    for i, label in enumerate([*labels, " "]):
        if label == " " and first is not None:
            spans.append((first, i - 1))
            first = None
        elif label != " " and first is None:
            first = i
    return spans


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def no_speech_segment(start: float, end: float) -> Segment:
    """A segment without words: silence, or what the model scored as no speech."""
    return Segment(start, end, "", [], None, None, True)


def ctc_best_path_characters(ctc_log_probs: torch.Tensor, blank: int = 0) -> int:
    """How many characters the CTC head reads on its own: its best path (each slot's most
    probable label), repeats merged, blanks dropped.

    Args:
        ctc_log_probs (torch.Tensor): `(T, V)` CTC log-probabilities of one chunk.
        blank (int, optional): the CTC blank id. (Default: ``0``)
    """
    return len(token_slots(ctc_log_probs.argmax(-1), blank))


def chunk_segment(
    text: str,
    tokens: list[int],
    labels: list[str],
    token_scores: list[float] | None,
    attention: torch.Tensor | None,
    frames: int,
    ctc_log_probs: torch.Tensor | None,
    start: float,
    end: float,
    frame_seconds: float,
    blank: int = 0,
) -> Segment:
    """The segment of one decoded chunk: its words with times and confidence.

    Args:
        text (str): the chunk's transcript.
        tokens (list[int]): the chosen characters' ids, ``U`` of them.
        labels (list[str]): one label per token (``" "`` parts words).
        token_scores (list[float] or None): each character's log-probability under the speller.
        attention (torch.Tensor or None): `(U, L)` attention weights (``None``: a speller
            without attention, whose words then get the segment's times).
        frames (int): listener frames of the chunk (``L`` or fewer, the rest is padding).
        ctc_log_probs (torch.Tensor or None): the chunk's CTC log-probabilities `(T, V)`,
            ``T = frames * u``; ``None`` for a model without a CTC head.
        start (float), end (float): the chunk's place in the file, in seconds.
        frame_seconds (float): seconds per listener frame.
        blank (int, optional): the CTC blank id. (Default: ``0``)

    Returns:
        Segment: with ``no_speech`` set, and no words, when the model hears no speech.
    """
    scores = list(token_scores) if token_scores is not None and len(token_scores) == len(tokens) else [0.0] * len(tokens)
    confidence = _mean(scores)
    if not tokens:
        return no_speech_segment(start, end)
    if ctc_log_probs is not None:
        if ctc_best_path_characters(ctc_log_probs, blank) < NO_SPEECH_CTC_SHARE * len(tokens):
            return no_speech_segment(start, end)
    elif confidence is None or confidence < NO_SPEECH_CONFIDENCE:
        return no_speech_segment(start, end)

    def clip(t: float) -> float:
        return min(max(t, start), end)

    spans = _word_spans(labels)
    if attention is not None and attention.size(-1) > 1 and len(tokens):
        peaks = attention_frames(attention, frames)
        attention_times = [
            (clip(start + peaks[a] * frame_seconds), clip(start + (peaks[b] + 1) * frame_seconds)) for a, b in spans
        ]
    else:  # one fixed vector (attention "none"): no alignment to read
        attention_times = [(start, end)] * len(spans)
    ctc_times, ctc_scores = None, None
    path = ctc_forced_align(ctc_log_probs, tokens, blank) if ctc_log_probs is not None and blank not in tokens else None
    if path is not None:
        slot_seconds = frame_seconds * frames / ctc_log_probs.size(0)
        slots = token_slots(path, blank)
        lp = ctc_log_probs.detach().float().cpu()
        ctc_scores = [float(lp[a : b + 1, token].max()) for (a, b), token in zip(slots, tokens)]
        ctc_times = [(clip(start + slots[a][0] * slot_seconds), clip(start + (slots[b][1] + 1) * slot_seconds)) for a, b in spans]
    words = []
    for w, (a, b) in enumerate(spans):
        timed = ctc_times[w] if ctc_times is not None else attention_times[w]
        words.append(
            Word(
                "".join(labels[a : b + 1]),
                timed[0],
                max(timed),
                _mean(scores[a : b + 1]),
                attention_times[w],
                ctc_times[w] if ctc_times is not None else None,
                _mean(ctc_scores[a : b + 1]) if ctc_scores is not None else None,
            )
        )
    return Segment(start, end, text, words, confidence, _mean(ctc_scores) if ctc_scores is not None else None, False)
