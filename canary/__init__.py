"""Rollouts, sequential analysis (SPRT + CUSUM), traffic shifting, live dashboard, leased chaos."""
