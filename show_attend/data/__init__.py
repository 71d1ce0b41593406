"""The captioner's data, read in this order:

* :mod:`~show_attend.data.images` - reading images safely, and the encoder's input transform.
* :mod:`~show_attend.data.readers` - manifests, imagefolders, Karpathy split files -> caption records.
* :mod:`~show_attend.data.dataset` - records -> images + captions -> padded batches.
* :mod:`~show_attend.data.feature_cache` - encoder features computed once, for a frozen encoder.
"""
