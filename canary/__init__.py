"""Rollouts, sequential analysis (SPRT + CUSUM), traffic shifting, live dashboard; chaos/ is its own app."""
