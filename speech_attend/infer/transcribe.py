"""Transcribing audio files with a trained model (a ``.ckpt`` or an exported folder).

Any sample rate and channel count is accepted (resampled and downmixed on reading). Each file is
cut into chunks at its pauses and trimmed to its speech, and chunks without speech are left empty
(:mod:`speech_attend.infer.pauses`); the chunks of consecutive files are decoded together in
batches and joined into one :class:`Transcript` per file, with segment and word times
(:mod:`speech_attend.infer.timing`).

:class:`Transcriber` is the Python interface, read as ``show_attend``'s :class:`Captioning` is::

    transcriber = Transcriber.load(device="cpu")  # the shipped model; or Transcriber.load("models/mine", beam_size=8)
    [result] = transcriber.transcribe(["talk.wav"])  # one Transcript per path, in order
    print(result.text, result.segments[0].words)
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import overload

import torch

from shared import Hypothesis
from shared.io.config import with_settings
from shared.io.devices import check_device
from shared.io.model_files import CheckpointError, export_folder, load_model_files
from speech_attend.data.audio import load_audio
from speech_attend.data.dataset import pad_waves
from speech_attend.infer.pauses import NO_SIGNAL_DBFS, QUIET_DBFS, chunk_audio
from speech_attend.infer.timing import Segment, chunk_segment, no_speech_segment
from speech_attend.model.las import LAS, DecodeConfig, build_recognizer
from speech_attend.model.lm import DEFAULT_LM_WEIGHT, MAX_LM_WEIGHT, CharLM, has_lm, load_lm, save_lm
from speech_attend.model.migrations import migrate_hyper_parameters

__all__ = [
    "Transcriber",
    "Transcript",
    "load_recognizer",
    "export_model",
    "APP",
    "SHIPPED_MODEL",
    "shipped_model",
]

APP = "speech-attend"
SHIPPED_MODEL = Path(__file__).resolve().parents[2] / "models" / "speech_attend"  # the model this project ships
_DEFAULT_MAX_CHUNK_SECONDS = 15.0  # the longest piece decoded at once, for a model that saved none
_CHUNKS_PER_BATCH = 16  # chunks decoded together (of one file or of consecutive ones)


@dataclass
class Transcript:
    """The result for one file.

    Attributes:
        audio (str): the file.
        text (str): the transcript (chunks joined by spaces).
        duration_s (float): seconds of audio.
        chunks (int): pieces the audio was decoded in.
        alignment (torch.Tensor): `(characters, listener frames)` attention over the whole file:
            each chunk's block where the chunk lies in the audio; the joining spaces have empty rows.
        labels (list[str]): one character per alignment row.
        warnings (list[str]): what the user should know about this file (too quiet, no speech found).
        segments (list[Segment]): one per chunk, in order: its start and end, words with their
            times and confidence, or ``no_speech`` (:mod:`speech_attend.infer.timing`).
    """

    audio: str
    text: str
    duration_s: float
    chunks: int
    alignment: torch.Tensor
    labels: list[str]
    warnings: list[str] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "audio": self.audio,
            "text": self.text,
            "duration_s": round(self.duration_s, 3),
            "chunks": self.chunks,
            "segments": [segment.to_json() for segment in self.segments],
        }


class Transcriber:
    """A trained recognizer, transcribing audio files: the Python face of ``speech-attend
    transcribe``, as :class:`show_attend.infer.caption.Captioning` is of ``show-attend caption``.
    ``Transcriber.load(path, device=..., beam_size=...)`` loads one; this holds a loaded
    :class:`~speech_attend.model.las.LAS`, the language model fused into its beam, and the decoding
    settings it transcribes with (the model's, less those replaced).

    Args:
        model (LAS): a trained recognizer (:func:`load_recognizer`; :meth:`load` reads a model file or folder).
        lm (CharLM or None, optional): a language model over the model's characters, fused with
            ``lm_weight``. (Default: ``None``)
        trim (bool, optional): trim the quiet edges of every chunk before decoding. (Default: ``True``)
        **decoding: settings that replace the model's :class:`DecodeConfig` (``beam_size``,
            ``ctc_weight``, ``lm_weight``, ``length_bonus``, ``max_chunk_seconds``: the longest piece
            decoded at once, by default the longest training utterance, 15 s if unknown; ...);
            ``None`` keeps the model's.

    Raises:
        ValueError: a setting out of range, one the decoding settings do not have, or a language
            model weight without a language model.
    """

    def __init__(self, model: LAS, lm: CharLM | None = None, trim: bool = True, **decoding):
        self.check_settings(**decoding)
        self.model, self.vocabulary, self.lm, self.trim = model, model.vocabulary, lm, trim
        self.decoding = with_settings(model.decoding, **decoding)
        if self.decoding.lm_weight > 0 and lm is None:
            raise ValueError(f"--lm-weight {self.decoding.lm_weight:g} needs a language model (lm)")

    @classmethod
    def load(
        cls,
        path: str | os.PathLike | None = None,
        device: str | torch.device = "cpu",
        lm: str | os.PathLike | None = None,
        trim: bool = True,
        **decoding,
    ) -> Transcriber:
        """Load a model from a ``.ckpt`` file or an exported folder (``None``: the shipped model).

        Args:
            path (str, PathLike or None): the model; ``None`` for :func:`shipped_model`. (Default: ``None``)
            device (str or torch.device, optional): ``cpu``, ``cuda`` or ``cuda:N``. (Default: ``"cpu"``)
            lm (str, PathLike or None, optional): a folder with a language model (``fit-lm --out``)
                fused into the beam; by default the model folder's own, if it holds one (``export --lm``).
            trim, **decoding: as for :class:`Transcriber`.

        Raises:
            ValueError: a device this machine lacks, or a setting out of range (before anything loads).
            CheckpointError: the model or its language model cannot be loaded.
        """
        check_device(device)  # the settings before the model loads
        cls.check_settings(**decoding)
        path = shipped_model() if path is None else path
        model = load_recognizer(path, device)
        language_model = _language_model(path, model.vocabulary, with_settings(model.decoding, **decoding), lm, device)
        return cls(model, language_model, trim, **decoding)

    @staticmethod
    def check_settings(
        beam_size: int | None = None,
        max_chunk_seconds: float | None = None,
        ctc_weight: float | None = None,
        lm_weight: float | None = None,
        length_bonus: float | None = None,
        **others,
    ) -> None:
        """Raises ValueError naming the first setting out of range (as its command-line option);
        ``others`` are checked by :class:`DecodeConfig` itself."""
        if beam_size is not None and beam_size < 1:
            raise ValueError(f"--beam-size must be >= 1, got {beam_size}")
        if ctc_weight is not None and not 0.0 <= ctc_weight <= 1.0:
            raise ValueError(f"--ctc-weight must be in [0, 1] (the CTC head's share of the rescoring score), got {ctc_weight:g}")
        if max_chunk_seconds is not None and not max_chunk_seconds > 0:
            raise ValueError(f"--max-chunk-seconds must be positive, got {max_chunk_seconds:g}")
        if lm_weight is not None and not 0.0 <= lm_weight <= MAX_LM_WEIGHT:  # also refuses NaN
            raise ValueError(f"--lm-weight must be in [0, {MAX_LM_WEIGHT:g}], got {lm_weight:g}")
        if length_bonus is not None and not math.isfinite(length_bonus):
            raise ValueError(f"--length-bonus must be a finite number, got {length_bonus:g}")
        with_settings(DecodeConfig(), **others)

    @property
    def max_chunk_seconds(self) -> float:
        """The longest piece decoded at once: the decoding settings', else 15 s."""
        return self.decoding.max_chunk_seconds or _DEFAULT_MAX_CHUNK_SECONDS

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def sample_rate(self) -> int:
        return self.model.sample_rate

    @overload
    def transcribe(self, paths: str | os.PathLike) -> Transcript: ...
    @overload
    def transcribe(self, paths: Iterable[str | os.PathLike]) -> list[Transcript]: ...

    def transcribe(self, paths):
        """Transcribe audio files (WAV, FLAC, OGG or MP3, any rate and channel count): a list of paths
        gives a list of transcripts, in order; one path, one transcript.

        Raises:
            ValueError: a file cannot be read as audio (:class:`AudioError`) or is too short
                (:meth:`transcribe_many` goes on past it).
        """
        one = isinstance(paths, (str, os.PathLike))
        results = []
        for result in self.transcribe_many([paths] if one else paths):
            if isinstance(result, ValueError):
                raise result
            results.append(result)
        return results[0] if one else results

    @torch.no_grad()
    def transcribe_many(self, audio_paths: Iterable[str | os.PathLike]) -> Iterator[Transcript | ValueError]:
        """Transcribe files in order, decoding the chunks of consecutive files together.

        Files are read until they hold ``_CHUNKS_PER_BATCH`` chunks with sound; those are decoded
        in batches of similar length, and the files' transcripts come back in order. A folder of
        short recordings thus decodes as batches rather than one file at a time. A file that
        cannot be read, or is too short, comes back as its error, in its place.
        """
        group: list[_File | ValueError] = []
        spoken = 0
        for path in audio_paths:
            try:
                file = self._prepare(path)
            except ValueError as err:  # AudioError included
                group.append(err)
                continue
            group.append(file)
            spoken += len(file.spans) - len(file.silent)
            if spoken >= _CHUNKS_PER_BATCH:
                yield from self._decode_group(group)
                group, spoken = [], 0
        yield from self._decode_group(group)

    def _prepare(self, audio_path: str | os.PathLike) -> _File:
        """Read a file and cut it into chunks (:func:`speech_attend.infer.pauses.chunk_audio`); which are silent."""
        wave = load_audio(audio_path, self.sample_rate)  # (N,)
        if wave.numel() < self.model.min_samples():
            raise ValueError(
                f"{audio_path}: audio of {wave.numel() / self.sample_rate:.3f} s is shorter than one listener frame; "
                f"expected at least {self.model.min_samples() / self.sample_rate:.3f} s"
            )
        chunks = chunk_audio(wave, self.sample_rate, self.max_chunk_seconds, self.model.min_samples(), self.trim)
        warnings = []
        if NO_SIGNAL_DBFS <= chunks.loudest_dbfs < QUIET_DBFS:
            warnings.append(
                f"{audio_path}: very quiet recording (its loudest 10 ms at {chunks.loudest_dbfs:.0f} dBFS; speech is usually "
                "above -40 dBFS): the transcript may be wrong or empty; record with more gain"
            )
        elif len(chunks.silent) == len(chunks.spans):
            warnings.append(f"{audio_path}: no speech found (silence or steady noise); the transcript is empty")
        return _File(str(audio_path), chunks.wave, chunks.spans, chunks.silent, warnings)

    def _decode_group(self, group: list[_File | ValueError]) -> Iterator[Transcript | ValueError]:
        """Decode the spoken chunks of the group's files in batches, then assemble each file's transcript."""
        files = [(f, file) for f, file in enumerate(group) if isinstance(file, _File)]
        chunks = [(f, i) for f, file in files for i in range(len(file.spans)) if i not in file.silent]
        chunks.sort(key=lambda key: -group[key[0]].chunk_samples(key[1]))  # longest first: batches of similar lengths
        decoded: dict[tuple[int, int], tuple[Hypothesis, int, torch.Tensor | None]] = {}
        for first in range(0, len(chunks), _CHUNKS_PER_BATCH):
            keys = chunks[first : first + _CHUNKS_PER_BATCH]
            batch, lengths = pad_waves([group[f].wave[slice(*group[f].spans[i])] for f, i in keys])
            ctc: list[torch.Tensor] = []  # (T, V) per chunk, with a CTC head: word times and confidence
            found, frames = self.model.decode(
                batch.to(self.device),
                lengths.to(self.device),
                self.decoding,
                ctc_posteriors=ctc,
                lm=self.lm,
            )
            ctc = [c.cpu() for c in ctc] or [None] * len(keys)
            decoded.update({key: (hyp, int(n), c) for key, hyp, n, c in zip(keys, found, frames.tolist(), ctc)})
        for f, file in enumerate(group):
            if isinstance(file, _File):
                yield self._assemble(file, {i: result for (g, i), result in decoded.items() if g == f})
            else:
                yield file

    def _assemble(self, file: _File, decoded: dict[int, tuple[Hypothesis, int, torch.Tensor | None]]) -> Transcript:
        """One file's transcript, alignment and segments from its decoded chunks; silent chunks, and
        chunks the model hears no speech in, are empty."""
        frame_samples = self.sample_rate * self.model.frame_seconds
        empty = Hypothesis([], 0.0, 0.0, True, None)
        segments = []
        results = []
        for i, (a, b) in enumerate(file.spans):
            start, end = a / self.sample_rate, b / self.sample_rate
            if i in file.silent:
                segments.append(no_speech_segment(start, end))
                results.append((empty, max(1, round((b - a) / frame_samples))))
                continue
            hyp, frames, ctc = decoded[i]
            text = "".join(self.vocabulary.decode(hyp.tokens))
            segments.append(
                chunk_segment(
                    text,
                    hyp.tokens,
                    self.vocabulary.decode(hyp.tokens, strip_specials=False),
                    hyp.token_scores,
                    hyp.attention,
                    frames,
                    ctc,
                    start,
                    end,
                    self.model.frame_seconds,
                    self.model.blank_id,
                )
            )
            results.append((empty if segments[-1].no_speech else hyp, frames))  # no invented text, in the alignment either
        hyps = [hyp for hyp, _ in results]
        offsets = [round(start / frame_samples) for start, _ in file.spans]  # each chunk where it starts in the audio
        alignment, labels = _join_alignments(hyps, [frames for _, frames in results], offsets, self.vocabulary)
        duration = file.wave.numel() / self.sample_rate
        text = " ".join(s.text for s in segments if s.text)
        warnings = file.warnings
        if not text and not warnings and len(file.silent) < len(file.spans):
            warnings = [
                *warnings,
                f"{file.path}: the model heard no speech (its CTC head reads almost none of the "
                "characters its speller wrote); the transcript is empty",
            ]
        return Transcript(file.path, text, duration, len(file.spans), alignment, labels, warnings, segments)

    def save_alignment(self, transcript: Transcript, out_dir: str | os.PathLike, name: str | None = None) -> Path:
        """Write ``<out_dir>/<name>.png``: characters against time. ``name`` is the file's output
        name (:func:`shared.io.outputs.output_names`); by default the audio file's stem."""
        from shared.evaluation.plots import save_alignment

        path = Path(out_dir) / f"{name or Path(transcript.audio).stem}.png"
        title = f"{Path(transcript.audio).name}: {transcript.text[:80]}"
        return save_alignment(transcript.alignment, path, transcript.labels, self.model.frame_seconds, title)


@dataclass
class _File:
    """A file read and cut into chunks, waiting for its chunks to be decoded."""

    path: str
    wave: torch.Tensor  # (N,)
    spans: list[tuple[int, int]]  # chunks, sample ranges
    silent: set[int]  # chunks left empty, not decoded
    warnings: list[str]  # for the user: too quiet, no speech found

    def chunk_samples(self, i: int) -> int:
        return self.spans[i][1] - self.spans[i][0]


def _join_alignments(hyps, encoder_lengths: list[int], offsets: list[int], vocabulary) -> tuple[torch.Tensor, list[str]]:
    """One alignment for all chunks, each chunk's block at its listener-frame offset in the audio
    (trimmed silence stays as empty columns), with a space row between chunks."""
    rows = sum(len(h.tokens) for h in hyps) + max(0, len(hyps) - 1)
    columns = max([1] + [offset + frames for offset, frames in zip(offsets, encoder_lengths)])
    matrix = torch.zeros(max(rows, 1), columns)
    labels: list[str] = []
    row = 0
    for i, (hyp, frames, col) in enumerate(zip(hyps, encoder_lengths, offsets)):
        if i:
            labels.append(" ")
            row += 1
        if hyp.attention is not None and len(hyp.tokens):
            weights = hyp.attention[:, :frames].float().cpu()  # one column for a fixed-vector speller's summary
            matrix[row : row + len(hyp.tokens), col : col + weights.size(1)] = weights
        labels.extend(vocabulary.decode(hyp.tokens, strip_specials=False))
        row += len(hyp.tokens)
    if not labels:
        labels = [""]
    return matrix, labels


# ----------------------------------------------------------------------------- loading a model


def shipped_model() -> Path:
    """The shipped model's folder (what ``transcribe`` uses without ``--ckpt``).

    Raises:
        CheckpointError: it is not there (an install without the repository's ``models/``).
    """
    if not (SHIPPED_MODEL / "model.safetensors").is_file():
        raise CheckpointError(f"{SHIPPED_MODEL}: the shipped model is not there; pass --ckpt with a model of your own")
    return SHIPPED_MODEL


def load_recognizer(path: str | os.PathLike, device: str | torch.device = "cpu") -> LAS:
    """The model stored in a checkpoint or exported folder, in eval mode, with its
    ``vocabulary`` and ``decoding`` settings.

    Raises:
        CheckpointError: unreadable, unsafe, or not a speech-attend model.
    """
    files = load_model_files(path, APP)  # CheckpointError names the file
    try:
        model = build_recognizer(files.hyper_parameters)
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(f"{path}: not a speech-attend model config ({str(err).splitlines()[0]})") from None
    try:
        missing, unexpected = model.load_state_dict(files.state_dict, strict=False)
    except RuntimeError as err:  # a weight of another shape
        raise CheckpointError(f"{path}: weights do not fit the saved config ({_first_problem(err)})") from None
    if missing or unexpected:
        named = [
            f"{len(keys)} {kind} ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
            for kind, keys in (("missing", missing), ("unexpected", unexpected))
            if keys
        ]
        raise CheckpointError(f"{path}: weights do not fit the saved config: {'; '.join(named)}")
    return model.to(device).eval()


def _first_problem(err: RuntimeError) -> str:
    """The first line of a ``load_state_dict`` error that says what is wrong, not its heading."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return next((line for line in lines[1:] if line), lines[0] if lines else "unreadable weights")


def _language_model(
    path: str | os.PathLike, vocabulary, decoding: DecodeConfig, lm: str | os.PathLike | None, device: str | torch.device
) -> CharLM | None:
    """The language model to fuse with ``decoding.lm_weight``: ``lm``, else the model folder's own, if any.

    Raises:
        ValueError: a weight over 0 without a language model. CheckpointError: the language
            model's files are unreadable, or over other characters than the recognizer's.
    """
    folder = lm if lm is not None else path if has_lm(path) else None
    if folder is None:
        if decoding.lm_weight > 0:
            raise ValueError(
                f"--lm-weight {decoding.lm_weight:g} needs a language model, and {path} holds none: "
                "pass --lm DIR (from speech-attend fit-lm) or a model exported with --lm"
            )
        return None
    model, _ = load_lm(folder, vocabulary)
    return model.to(device)


# ----------------------------------------------------------------------------- exporting a model


def export_model(
    ckpt: str | os.PathLike,
    out_dir: str | os.PathLike,
    lm: str | os.PathLike | None = None,
    lm_weight: float | None = None,
    length_bonus: float | None = None,
    beam_size: int | None = None,
    ctc_weight: float | None = None,
    half: bool = False,
) -> Path:
    """Write ``model.safetensors`` + ``config.json`` (settings, vocabulary; the feature
    statistics are in the weights) to ``out_dir``; with ``lm``, or when ``ckpt`` is a folder
    that holds one, also its language model (``lm.safetensors`` + ``lm.json``, in the
    recognizer's character order), fused by default with ``lm_weight`` and ``length_bonus``,
    saved in the decoding settings.

    Args:
        lm_weight (float or None, optional): by default ``DEFAULT_LM_WEIGHT`` for a new language
            model, the saved weight for one that ``ckpt`` holds.
        length_bonus (float or None, optional): by default the saved one (0 unless set).
        beam_size (int or None, optional): beams, saved as ``transcribe``'s default; by default
            the checkpoint's.
        ctc_weight (float or None, optional): the CTC head's weight in the n-best rescoring, saved
            as ``transcribe``'s default; by default the checkpoint's.
        half (bool, optional): store the weights in float16 (half the size; loading widens them
            back to float32). (Default: ``False``)

    Raises:
        CheckpointError: unreadable files, or a language model over other characters.
        ValueError: ``lm_weight`` outside [0, 2], ``beam_size`` under 1, or ``ctc_weight`` outside [0, 1].
    """
    Transcriber.check_settings(beam_size, ctc_weight=ctc_weight, lm_weight=lm_weight, length_bonus=length_bonus)
    model = load_recognizer(ckpt)
    if lm is None and has_lm(ckpt):
        lm = ckpt
    elif lm is not None and lm_weight is None:
        lm_weight = DEFAULT_LM_WEIGHT
    decoding = with_settings(
        model.decoding, lm_weight=lm_weight, length_bonus=length_bonus, beam_size=beam_size, ctc_weight=ctc_weight
    )
    language_model = _language_model(ckpt, model.vocabulary, decoding, lm, "cpu")
    hparams = migrate_hyper_parameters(load_model_files(ckpt, APP).hyper_parameters)  # an export is written in the current layout
    hparams["decoding"] = asdict(decoding)
    state = {name: t.half() if half and t.is_floating_point() else t for name, t in model.state_dict().items()}
    out = export_folder(out_dir, APP, state, hparams)
    if language_model is not None:
        record = {k: v for k, v in load_lm(lm)[1].items() if k not in ("lm", "vocabulary")}  # how it was trained
        save_lm(out, language_model, model.vocabulary, record)
    return out
