"""The simulated traffic generator: its retry-storm schedule follows the storm starts and lengths."""

from __future__ import annotations

import numpy as np
import pytest

from canary.simulated_traffic import CLASSES, MAX_TICKS, Simulator


def _storm_tick_by_tick(seed: int, storm_prob: float, rollouts: int) -> np.ndarray:
    """The schedule spelled out tick by tick: a storm starting at s covers s .. s + length - 1."""
    rng = np.random.default_rng([seed, 7_777_777])
    shape = (MAX_TICKS, rollouts)
    rng.uniform(0, 2 * np.pi, rollouts)  # phases
    rng.random(shape)  # bursts
    starts = rng.random(shape) < storm_prob
    lengths = rng.integers(1, 5, shape)
    storm = np.zeros(shape, dtype=bool)
    for s in range(MAX_TICKS):
        for r in range(rollouts):
            if starts[s, r]:
                storm[s : s + lengths[s, r], r] = True
    return storm


@pytest.mark.parametrize("name", sorted(CLASSES))
@pytest.mark.parametrize("rollouts", [1, 5])
def test_storms_last_their_drawn_length_from_their_start(name, rollouts):
    cls = CLASSES[name]
    for seed in (0, 1, 17, 2**40 + 3):
        sim = Simulator(cls, seed=seed, rollouts=rollouts)
        assert sim.storm.shape == (MAX_TICKS, rollouts)
        assert (sim.storm == _storm_tick_by_tick(seed, cls.storm_prob, rollouts)).all()
