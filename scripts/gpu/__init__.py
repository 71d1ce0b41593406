"""The GPU check and training (``bash scripts/gpu/check.sh``, ``bash scripts/gpu/train_recognizer.sh``),
what they record (``python -m scripts.gpu.report``), and the wheels a machine without network needs
(``scripts/gpu/fetch_wheels.sh``)."""
