"""Example DAGs; their training scripts live in ``training/`` beside them."""

from pathlib import Path

TRAINING_DIR = Path(__file__).resolve().parent / "training"
