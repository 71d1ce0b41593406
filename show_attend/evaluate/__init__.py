"""Measuring the captioner's captions against their references:

* :mod:`~show_attend.evaluate.metrics` - BLEU-1..4, ROUGE-L, CIDEr-D, METEOR and exact match, computed
  as the COCO caption evaluation computes them;
* :mod:`~show_attend.evaluate.evaluate` - a model scored on a split with its beam search
  (``show-attend evaluate``), without Lightning.

The metrics are pure functions of captions; what both apps measure (collapse, attention against
occlusion) and the plots are in :mod:`shared.evaluation`.
"""
