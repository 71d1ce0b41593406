"""The recognizer's data, read in this order:

* :mod:`~speech_attend.data.audio` - reading audio files into mono float tensors.
* :mod:`~speech_attend.data.text` - the one transcript normalisation every corpus goes through.
* :mod:`~speech_attend.data.readers` - manifests, audiofolders, LibriSpeech trees, Common Voice TSVs -> utterances.
* :mod:`~speech_attend.data.dataset` - utterances -> waveforms + text -> padded batches with the speller's ids.
* :mod:`~speech_attend.data.sampler` - length-bucketed batches.
* :mod:`~speech_attend.data.voice_shift` - new voices from one: pitch and formant shifts.
* :mod:`~speech_attend.data.augment` - the acoustic conditions drawn for training batches.
"""
