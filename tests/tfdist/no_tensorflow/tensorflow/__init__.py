"""Stands in for TensorFlow in children that must not import it (tests/tfdist/cli_runner.py)."""

raise ImportError("tfdist imported tensorflow")
