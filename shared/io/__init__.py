"""Reading and writing what the programs read and write, for training and inference alike.
No Lightning here: ``caption`` and ``transcribe`` import these modules without loading it.

* :mod:`~shared.io.data_files`: the manifests and Hugging Face folders both apps read, row by row;
* :mod:`~shared.io.bad_samples`: the marker a dataset returns for a file it could not read;
* :mod:`~shared.io.config`: dataclass configs from the plain dicts that model files store;
* :mod:`~shared.io.model_files`: checkpoints and exported models, loaded without running pickled code;
* :mod:`~shared.io.devices`: the ``--device`` of inference, checked before a model loads;
* :mod:`~shared.io.writes`: files written whole or not at all, and a failed write (a full disk)
  said in one line;
* :mod:`~shared.io.outputs`: the commands' output folders (made and checked before any work) and
  the file names derived from the inputs;
* :mod:`~shared.io.commands`: the command-line frame: sub-commands, one-line errors, exit codes.

These import only the attention core (:mod:`shared`) and each other. Nothing is imported here.
"""
