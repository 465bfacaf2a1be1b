"""The synthetic price model of the replay (the trace has no prices).

On-demand: the trace normalises capacity to its largest machine; Kiln reads 1.0
cpu as 64 vCPU and 1.0 memory as 256 GiB (an m5.16xlarge) and prices them with
the m5 family's split, $0.0336 per vCPU-hour and $0.0036 per GiB-hour, which
reproduces m5 list prices exactly (m5.large: 2 x 0.0336 + 8 x 0.0036 = $0.096/h).
A (0.5, 0.5) trace machine is then 32 vCPU / 128 GiB at $1.536/h (an m5.8xlarge).

Spot: every machine draws u ~ U[0, 1) once from the seed and is spot when
u < spot fraction, so a higher fraction keeps every spot machine of a lower one.
A spot machine's discount is drawn from U[0.55, 0.80] (spot sells 55-80% under
on-demand) and its interruption bucket from the Spot Advisor bands
<5%, 5-10%, 10-15%, 15-20%, >20% with probabilities 0.45, 0.25, 0.15, 0.10, 0.05.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.scoring import INTERRUPTION_BUCKETS

VCPU_PER_UNIT = 64
GIB_PER_UNIT = 256
VCPU_HOUR = 0.0336
GIB_HOUR = 0.0036
SPOT_DISCOUNT_RANGE = (0.55, 0.80)
BUCKET_PROBABILITIES = (0.45, 0.25, 0.15, 0.10, 0.05)


def on_demand_price(cpu: np.ndarray | float, mem: np.ndarray | float) -> np.ndarray:
    """On-demand $/h of a machine with normalised cpu and memory capacity."""
    return np.asarray(cpu) * VCPU_PER_UNIT * VCPU_HOUR + np.asarray(mem) * GIB_PER_UNIT * GIB_HOUR


@dataclass
class PriceModel:
    """Per-machine draws for one seed: the spot lottery, discount and interruption bucket."""

    lottery: np.ndarray
    discount: np.ndarray
    bucket: np.ndarray

    @classmethod
    def draw(cls, machines: int, seed: int) -> PriceModel:
        """Draw the per-machine values for `machines` machines (indexed by sorted machine id)."""
        rng = np.random.default_rng(seed)
        lottery = rng.random(machines)
        discount = rng.uniform(*SPOT_DISCOUNT_RANGE, size=machines)
        bucket = rng.choice(len(BUCKET_PROBABILITIES), size=machines, p=BUCKET_PROBABILITIES)
        return cls(lottery, discount, bucket)

    def spot_mask(self, fraction: float) -> np.ndarray:
        """Which machines are spot at this fraction (nested across fractions)."""
        return self.lottery < fraction

    def likelihood(self) -> np.ndarray:
        """Interruption likelihood in [0, 1] of each machine's bucket (used only when spot)."""
        values = np.array([v for _, v in INTERRUPTION_BUCKETS])
        return values[self.bucket]

    def prices(self, cpu: np.ndarray, mem: np.ndarray, spot: np.ndarray) -> np.ndarray:
        """$/h per machine: on-demand, or on-demand * (1 - discount) for spot machines."""
        base = on_demand_price(cpu, mem)
        return np.where(spot, base * (1.0 - self.discount), base)
