"""The recognizer's built-in world: English sentences spoken by speech synthesisers, written as a
LibriSpeech tree (``speech-attend prepare synth``). Read in this order:

* :mod:`~speech_attend.builtin.corpus` - the corpus: who says which sentence in which split, in parallel.
* :mod:`~speech_attend.builtin.sentences`, :mod:`~speech_attend.builtin.wordnet_sentences`,
  :mod:`~speech_attend.builtin.numbers` - the text: template sentences, WordNet's examples, numbers in words.
* :mod:`~speech_attend.builtin.speakers` - the voices (piper's shifted by :mod:`speech_attend.data.voice_shift`).
* :mod:`~speech_attend.builtin.espeak`, :mod:`~speech_attend.builtin.piper_voice` - the two synthesisers.
"""
