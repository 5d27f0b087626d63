"""Helpers for tests and demos (tiny random checkpoints)."""
