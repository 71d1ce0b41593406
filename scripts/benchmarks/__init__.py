"""Benchmarks that set this project beside others: ``python -m scripts.benchmarks.<name>``."""
