"""Experiments: the recognizer's recipe search (one YAML file per recipe in ``recipes/``), the attention
studies (``bottleneck``, ``faithfulness``), and averaging and growing trained models:
``python -m scripts.experiments.<name>``."""
