"""The Lightning plumbing both apps share: how a model is trained, checkpointed, resumed and
evaluated.

* :mod:`~shared.training.cli`: the LightningCLI base of ``fit|validate|test`` (the other commands
  and their one-line errors are :mod:`shared.io.commands`);
* :mod:`~shared.training.module`: the LightningModule base with the evaluation loop;
* :mod:`~shared.training.checkpoints`: the run layout, atomic writes, ``last``/``best``;
* :mod:`~shared.training.resume`: exact resumption;
* :mod:`~shared.training.averaging`: the weights' moving average, and the mean of several models;
* :mod:`~shared.training.guards`: unreadable files (marked by :mod:`shared.io.bad_samples`) and
  non-finite numbers;
* :mod:`~shared.training.run_logger`: ``metrics.csv``, written whole or not at all;
* :mod:`~shared.training.schedule`: the optimiser settings and the learning-rate schedule;
* :mod:`~shared.training.threads`: a running training's thread count, changed from outside.

What inference needs as well (model files, devices, configs, writes) is in :mod:`shared.io`,
which imports no Lightning. Nothing is imported here.
"""
