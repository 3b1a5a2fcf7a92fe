"""The Classifier node: definition.json + executor.py."""
