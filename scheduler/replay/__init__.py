"""Replay of the Google 2011 cluster trace against Kiln's scorer and a default kube-scheduler model."""

from scheduler.replay.cluster import ReplayConfig
from scheduler.replay.prices import PriceModel
from scheduler.replay.sim import RunResult, run_many, run_replay
from scheduler.replay.trace import Trace, load_trace, parse_parts

__all__ = [
    "PriceModel",
    "ReplayConfig",
    "RunResult",
    "Trace",
    "load_trace",
    "parse_parts",
    "run_many",
    "run_replay",
]
