"""The recognizer's network, read in this order:

* :mod:`~speech_attend.model.features` - waveform -> DC removal and level -> log-mel -> normalisation -> SpecAugment.
* :mod:`~speech_attend.model.listener` - the pyramidal BiLSTM that shortens and encodes the frames.
* :mod:`~speech_attend.model.speller` - the attention LSTM that writes characters.
* :mod:`~speech_attend.model.las` - Listen, Attend and Spell with its CTC head: configs, forward, decode.
* :mod:`~speech_attend.model.lm` - the character language model and the beam's weighted scorers.
* :mod:`~speech_attend.model.migrations` - older model files read as today's.
"""
