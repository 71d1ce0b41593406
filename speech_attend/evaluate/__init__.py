"""Measuring the recognizer: its evaluation groups, the conditions it is scored under, and the scores.

* :mod:`~speech_attend.evaluate.metrics` - corpus WER and CER, per-utterance word edits, and the paired
  bootstrap intervals of a WER ratio and of a difference of mean WERs;
* :mod:`~speech_attend.evaluate.devsets` - the evaluation groups (``speech-attend prepare devsets``),
  with :mod:`~speech_attend.evaluate.engines` (Flite and Festival) and the human recordings;
* :mod:`~speech_attend.evaluate.conditions` - noise, rooms, offsets, levels and long files;
* :mod:`~speech_attend.evaluate.evaluate` - the one loop that scores a model on groups under
  conditions (``speech-attend evaluate``), with :mod:`~speech_attend.evaluate.word_times` (word
  times against the truth, sounds without speech);
* :mod:`~speech_attend.evaluate.tune` - decoding settings compared on dev data (``speech-attend tune``).

The metrics are pure functions of transcripts; the rest transcribes with
:class:`~speech_attend.infer.transcribe.Transcriber` (no Lightning). What both apps measure
(collapse, attention against occlusion) and the plots are in :mod:`shared.evaluation`.
"""
