"""Chaos benchmarks: the safety lever's stop time (levers.py)."""
