"""show_attend: the image captioner of Show, Attend and Tell (Xu et al. 2015, arXiv 1502.03044).

Read top-down:

* :mod:`show_attend.shapes` - the built-in data: scenes of coloured shapes with exact captions.
* :mod:`show_attend.data` - Karpathy split files, images, vocabulary, batches, feature cache.
* :mod:`show_attend.encoder` - the CNN whose feature grid is what attention looks at.
* :mod:`show_attend.decoder` - the attention LSTM: soft or hard attention, gate, deep output.
* :mod:`show_attend.module` - the LightningModule: the loss, beam-search evaluation, metrics.
* :mod:`show_attend.pointing` - does the attention look at the object a word names?
* :mod:`show_attend.caption` - captioning image files, overlays, export.
* :mod:`show_attend.cli` - the ``show-attend`` command.

The attention itself (score, normalise, read) and the beam search live in :mod:`shared`.
"""
