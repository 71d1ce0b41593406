"""Where the recognizer looked for a character, against where the character came from.

For each character of the model's own transcript, teacher-forced on that transcript:

* the alignment: the speller's attention over the listener frames;
* the occlusion map: how far ``log p(character_u)`` falls when one span of ``span`` listener
  frames (3 by default, 240 ms with the usual 8x listener) is replaced by the utterance's mean
  listener state;
* their comparison per span (:func:`shared.evaluation.faithfulness.compare_maps`), the
  attention summed over each span's frames.

No Lightning here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from shared.evaluation.faithfulness import MapComparison, compare_maps
from speech_attend.data.audio import load_audio
from speech_attend.model.las import LAS

__all__ = ["CharExplanation", "AudioExplanation", "char_log_probs", "span_drops", "explain_waveform", "explain_files"]

_VARIANTS_PER_PASS = 32


@dataclass
class CharExplanation:
    """One character: attention and drop per span `(S,)`, and how they compare."""

    char: str
    attention: torch.Tensor
    drops: torch.Tensor
    comparison: MapComparison


@dataclass
class AudioExplanation:
    """The model's transcript of one file, character by character.

    Attributes:
        alignment (torch.Tensor): attention `(U, L)` over listener frames.
        frame_drops (torch.Tensor): each span's drop spread over its frames `(U, L)`.
        frame_seconds (float): seconds of audio per listener frame.
    """

    audio: Path
    chars: list[CharExplanation]
    alignment: torch.Tensor
    frame_drops: torch.Tensor
    frame_seconds: float

    @property
    def text(self) -> str:
        return "".join(c.char for c in self.chars)

    # What ``write_explanations`` reads, named alike for both apps.
    source = property(lambda self: self.audio)
    outputs = property(lambda self: self.chars)

    def to_json(self) -> list[dict]:
        return [
            {"audio": str(self.audio), "position": u, "char": c.char, **c.comparison.to_json()} for u, c in enumerate(self.chars)
        ]


@torch.no_grad()
def char_log_probs(
    model: LAS, states: torch.Tensor, lengths: torch.Tensor, tokens: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced ``log p(character_u)`` and the speller's attention (:meth:`LAS.score`).

    Args:
        model (LAS): in eval mode.
        states (torch.Tensor): listener states `(N, L, D)`.
        lengths (torch.Tensor): listener frames `(N,)`.
        tokens (list of int): the transcript's character ids, the same for every row.

    Returns:
        (torch.Tensor, torch.Tensor): `(N, U)` and `(N, U, L)`.
    """
    rows = states.size(0)
    if not tokens:
        return states.new_zeros(rows, 0), states.new_zeros(rows, 0, states.size(1))
    sequence = torch.tensor([model.vocabulary.sos_id, *tokens], device=states.device).expand(rows, -1)  # (N, U + 1)
    log_probs, alignments = model.score(states, lengths, sequence)
    return log_probs, alignments.float()


@torch.no_grad()
def span_drops(model: LAS, states: torch.Tensor, length: int, tokens: Sequence[int], span: int = 3) -> torch.Tensor:
    """How far each character's log-probability falls when each span of ``span`` frames is
    replaced by the mean listener state of the utterance.

    Args:
        states (torch.Tensor): one utterance's listener states `(1, L, D)`.
        length (int): its real frames.

    Returns:
        torch.Tensor: drops `(S, U)`, ``S = ceil(length / span)``.
    """
    frames = torch.arange(states.size(1), device=states.device)
    lengths = torch.tensor([length], device=states.device)
    base, _ = char_log_probs(model, states, lengths, tokens)
    mean = states[:, :length].mean(1, keepdim=True)  # (1, 1, D)
    starts = list(range(0, length, span))
    drops = []
    for chunk in range(0, len(starts), _VARIANTS_PER_PASS):
        first = torch.tensor(starts[chunk : chunk + _VARIANTS_PER_PASS], device=states.device)
        masks = (frames[None] >= first[:, None]) & (frames[None] < (first[:, None] + span).clamp_max(length))  # (m, L)
        variants = torch.where(masks[:, :, None], mean, states)  # (m, L, D)
        drops.append(base - char_log_probs(model, variants, lengths.expand(len(first)), tokens)[0])
    return torch.cat(drops)  # (S, U)


@torch.no_grad()
def explain_waveform(model: LAS, wave: torch.Tensor, path: Path, span: int = 3) -> AudioExplanation:
    """Transcribe one waveform `(N,)` with the model's decoding settings and explain each character (module docstring)."""
    vocabulary = model.vocabulary
    states, frames = model.encode(wave[None], torch.tensor([wave.numel()], device=wave.device))  # (1, L, D)
    (hyp,) = model.search(states, frames)
    length, tokens = int(frames[0]), hyp.tokens
    _, alignment = char_log_probs(model, states, frames, tokens)  # (1, U, L)
    alignment = alignment[0, :, :length].cpu()  # (U, L)
    drops = span_drops(model, states, length, tokens, span).cpu()  # (S, U)
    owner = torch.arange(length) // span  # the span of each frame
    spans = drops.size(0)
    span_attention = torch.zeros(len(tokens), spans).index_add_(1, owner, alignment)  # (U, S)
    chars = [
        CharExplanation(char, span_attention[u], drops[:, u], compare_maps(span_attention[u], drops[:, u]))
        for u, char in enumerate(vocabulary.decode(tokens, strip_specials=False))
    ]
    frame_drops = drops.t()[:, owner] if tokens else torch.zeros(0, length)  # (U, L)
    return AudioExplanation(path, chars, alignment, frame_drops, model.frame_seconds)


def explain_files(model: LAS, paths: Iterable[str | Path], span: int = 3) -> Iterator[AudioExplanation | ValueError]:
    """Explain audio files in order; an unreadable or too short file comes back as its error."""
    device = next(model.parameters()).device
    for path in paths:
        try:
            wave = load_audio(path, model.sample_rate)
            if wave.numel() < model.min_samples():
                raise ValueError(f"{path}: audio of {wave.numel()} samples is shorter than one listener frame")
        except ValueError as err:  # AudioError included
            yield err
            continue
        yield explain_waveform(model, wave.to(device), Path(path), span)


def save_explanation(explanation: AudioExplanation, path: str | Path) -> Path:
    """One PNG: the alignment beside the occlusion map, characters against time."""
    from shared.evaluation.plots import save_alignment_and_occlusion

    labels = [c.char for c in explanation.chars]
    return save_alignment_and_occlusion(
        explanation.alignment,
        explanation.frame_drops,
        path,
        labels,
        explanation.frame_seconds,
        f"{explanation.audio.name}: {explanation.text[:80]}",
    )
