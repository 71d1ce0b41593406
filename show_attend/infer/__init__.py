"""Using a trained captioner, read in this order:

* :mod:`~show_attend.infer.caption` - loading a model, captioning files (:class:`Captioning`), overlays, exporting.
* :mod:`~show_attend.infer.gallery` - one page for many captioned images.
* :mod:`~show_attend.infer.explain` - where the model looked for a word, against where it came from.
"""
