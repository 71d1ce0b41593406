"""show_attend: the image captioner of Show, Attend and Tell (Xu et al. 2015, arXiv 1502.03044).

Both apps have the same folders, read in this order (``speech_attend`` names its pieces alike):

* :mod:`show_attend.model` - the network: the CNN encoder, the attention decoder, the captioner.
* :mod:`show_attend.data` - images and captions: readers, images, dataset, batches, the feature cache.
* :mod:`show_attend.train` - Lightning: the loss and optimiser (module), the data module, pointing accuracy.
* :mod:`show_attend.infer` - using a trained model: caption files, overlays, the gallery, explain.
* :mod:`show_attend.builtin` - the built-in world: scenes of coloured shapes with exact captions.
* :mod:`show_attend.cli` - the ``show-attend`` command.

``model`` and ``data`` import nothing else of the app; ``train`` and ``infer`` build on them; the
built-in world needs only ``data``; ``cli`` joins them. The attention itself (score, normalise,
read) and the beam search live in :mod:`shared`.
"""
