"""show_attend: the image captioner of Show, Attend and Tell (Xu et al. 2015, arXiv 1502.03044).

Both apps have the same folders, read in this order (``speech_attend`` names its pieces alike):

* :mod:`show_attend.model` - the network: the CNN encoder, the attention decoder, the captioner, older files' migrations.
* :mod:`show_attend.data` - images and captions: readers, images, dataset, batches, the feature cache.
* :mod:`show_attend.evaluate` - measuring captions: BLEU, ROUGE-L, CIDEr-D, METEOR.
* :mod:`show_attend.train` - Lightning: the loss and optimiser (module), the data module, pointing accuracy.
* :mod:`show_attend.infer` - using a trained model: caption files, overlays, the gallery, explain.
* :mod:`show_attend.builtin` - the built-in world: scenes of coloured shapes with exact captions.
* :mod:`show_attend.cli` - the ``show-attend`` command.

``model``, ``data`` and ``evaluate`` import nothing else of the app; ``train`` builds on all three
and ``infer`` on ``model`` and ``data``; the built-in world needs only ``data``; ``cli`` joins them.
The attention itself (score, normalise, read) and the beam search live in :mod:`shared`.
"""

__all__ = ["Captioning", "CaptionResult"]  # the Python interface: ``Captioning.load(path, device=...).caption(paths)``


def __getattr__(name: str):
    # loaded on first use, so that importing one folder (``show_attend.data``) does not load the model too
    if name in __all__:
        from show_attend.infer import caption

        return getattr(caption, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
