"""Benchmarks: each app's training step and beam search, transcription as a user waits for it, the
augmentation, threads handed over, corpus statistics, and this project beside others:
``python -m scripts.benchmarks.<name>``."""
