"""Evaluation both apps use: how varied the outputs are, whether attention decides the output,
and the plots that show attention (overlays on images, alignments over time) and training curves.

Pure functions of decoded outputs, maps and numbers; nothing here knows Lightning or a model, and
nothing imports more of :mod:`shared` than the core and :mod:`shared.io`.

* :mod:`shared.evaluation.collapse`: how varied the outputs are (distinct and looping shares);
* :mod:`shared.evaluation.faithfulness`: attention against occlusion, over the same positions;
* :mod:`shared.evaluation.plots`: attention overlays, alignment plots, training curves.

Each app's own metrics live in the app: :mod:`show_attend.evaluate` (BLEU, ROUGE-L, CIDEr-D,
METEOR) and :mod:`speech_attend.evaluate` (WER, CER).
"""
