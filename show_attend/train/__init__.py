"""Training the captioner, read in this order:

* :mod:`~show_attend.train.module` - the LightningModule: the loss, REINFORCE for hard attention, the optimiser.
* :mod:`~show_attend.train.datamodule` - the LightningDataModule: a data set, its vocabulary, its loaders.
* :mod:`~show_attend.train.cli` - ``fit``, ``validate`` and ``test``: the LightningCLI, imported only for them.
* :mod:`~show_attend.train.pointing` - does the attention look at the object a word names?
"""
