"""Command-line scripts of the project: benchmarks, evaluations, data builders (run from the repository root)."""
