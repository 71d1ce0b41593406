"""The Lightning plumbing both apps share: how a model is trained, checkpointed, resumed,
evaluated, and loaded back.

* :mod:`~shared.training.cli` and :mod:`~shared.training.commands`: the command-line base
  (LightningCLI for ``fit|validate|test``, one-line errors for every command);
* :mod:`~shared.training.module`: the LightningModule base with the evaluation loop;
* :mod:`~shared.training.checkpoints`: the run layout, atomic writes, ``last``/``best``;
* :mod:`~shared.training.resume`: exact resumption;
* :mod:`~shared.training.guards` and :mod:`~shared.training.bad_samples`: unreadable files and
  non-finite numbers;
* :mod:`~shared.training.model_files`: loading checkpoints and exported models safely;
* :mod:`~shared.training.devices`: the ``--device`` of inference, checked before a model loads;
* :mod:`~shared.training.writes`: files written whole or not at all, and a failed write (a full
  disk) said in one line;
* :mod:`~shared.training.schedule` and :mod:`~shared.training.config`: the learning-rate
  schedule and dataclass configs from plain dicts.

Nothing is imported here, so that inference can use the modules that need no Lightning
(``model_files``, ``devices``, ``bad_samples``, ``config``, ``commands``, ``writes``) without loading it.
"""
