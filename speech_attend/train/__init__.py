"""Training the recognizer, read in this order:

* :mod:`~speech_attend.train.module` - the LightningModule: the loss, the optimiser, validation by beam search.
* :mod:`~speech_attend.train.datamodule` - the LightningDataModule: a corpus, its vocabulary, its loaders.
* :mod:`~speech_attend.train.cli` - ``fit``, ``validate`` and ``test``: the LightningCLI, imported only for them.
* :mod:`~speech_attend.train.lm` - fitting the character language model on text alone.
"""
