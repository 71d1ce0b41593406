"""The lab around the product: the demo, benchmarks, experiments and the GPU check, each a room
(a package) whose scripts run from the repository's root as ``python -m scripts.<room>.<name>``.

- :mod:`scripts.demo`: ``make demo`` (``python -m scripts.demo.run``), its lanes, its page and the failure modes;
- :mod:`scripts.benchmarks`: timings, profiles and peers' scores;
- :mod:`scripts.experiments`: the recipe search (one YAML file per recipe in ``experiments/recipes/``),
  the attention studies, averaging and growing models;
- :mod:`scripts.gpu`: the GPU check and training, and their report.

What users run is the apps' own commands (``show-attend``, ``speech-attend``); nothing in the
packages imports these.
"""
