"""Evaluation shared by both apps: caption metrics, speech metrics, and the plots that show
attention (overlays on images, alignments over time) and training curves.

Pure functions of decoded outputs and references; nothing here knows Lightning or a model.

* :mod:`shared.evaluation.captions`: BLEU-1..4, ROUGE-L, CIDEr-D, METEOR, exact match;
* :mod:`shared.evaluation.speech`: corpus WER and CER, and the paired bootstrap interval of a WER ratio;
* :mod:`shared.evaluation.collapse`: how varied the outputs are (distinct and looping shares);
* :mod:`shared.evaluation.plots`: attention overlays, alignment plots, training curves.
"""
