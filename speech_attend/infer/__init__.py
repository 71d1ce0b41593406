"""Using a trained recognizer, read in this order:

* :mod:`~speech_attend.infer.transcribe` - loading a model, decoding files (:class:`Transcriber`), exporting.
* :mod:`~speech_attend.infer.pauses` - cutting audio at its pauses, and the chunks that hold no speech.
* :mod:`~speech_attend.infer.timing` - segment and word times and confidence.
* :mod:`~speech_attend.infer.subtitles` - txt, json, srt, vtt and tsv files.
* :mod:`~speech_attend.infer.explain` - where the model looked for a character, against where it came from.
"""
