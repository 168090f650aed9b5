"""Trained small models: seeded synthetic tasks, torch twins of the numpy models for training, experiments,
and the checkpoints the numpy models load for inference (``hybrid-lab train``; notebook 10)."""
