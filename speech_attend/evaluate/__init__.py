"""Measuring the recognizer's transcripts against their references:

* :mod:`~speech_attend.evaluate.metrics` - corpus WER and CER, per-utterance word edits, and the paired
  bootstrap interval of a WER ratio.

Pure functions of transcripts; what both apps measure (collapse, attention against occlusion) and the
plots are in :mod:`shared.evaluation`.
"""
