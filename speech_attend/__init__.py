"""speech_attend: the speech recognizer of Listen, Attend and Spell (Chan et al. 2016, arXiv 1508.01211).

Both apps have the same folders, read in this order (``show_attend`` names its pieces alike):

* :mod:`speech_attend.model` - the network: front end, listener, speller, the LAS model, its language model, older files' migrations.
* :mod:`speech_attend.data` - audio and transcripts: readers, normalisation, dataset, batches, training conditions.
* :mod:`speech_attend.evaluate` - measuring transcripts: WER, CER, the interval of a WER ratio.
* :mod:`speech_attend.train` - Lightning: the loss and optimiser (module), the data module, fitting the language model.
* :mod:`speech_attend.infer` - using a trained model: transcribe files, cut at their pauses, timings, subtitles, explain.
* :mod:`speech_attend.builtin` - the built-in world: sentences spoken by speech synthesisers.
* :mod:`speech_attend.cli` - the ``speech-attend`` command.

``model``, ``data`` and ``evaluate`` import nothing else of the app; ``train`` builds on all three
and ``infer`` on ``model`` and ``data``; the built-in world needs only ``data``; ``cli`` joins them.
The attention itself (score, normalise, read) and the beam search live in :mod:`shared`.
"""

__all__ = ["Transcriber", "Transcript"]  # the Python interface: ``Transcriber.load(path, device=...).transcribe(paths)``


def __getattr__(name: str):
    # loaded on first use, so that importing one folder (``speech_attend.data``) does not load the model too
    if name in __all__:
        from speech_attend.infer import transcribe

        return getattr(transcribe, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
