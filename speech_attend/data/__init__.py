"""The recognizer's data, read in this order:

* :mod:`~speech_attend.data.audio` - reading audio files into mono float tensors.
* :mod:`~speech_attend.data.text` - the one transcript normalisation every corpus goes through.
* :mod:`~speech_attend.data.readers` - LibriSpeech trees, Common Voice TSVs, manifests -> utterances.
* :mod:`~speech_attend.data.dataset` - utterances -> waveforms + text -> padded batches.
* :mod:`~speech_attend.data.sampler` - length-bucketed batches.
* :mod:`~speech_attend.data.augment` - the acoustic conditions drawn for training batches.
"""
