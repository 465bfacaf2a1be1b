"""The tests' local Kubernetes API server: tests/support/kube_sim.py, under the name tests use."""

from tests.support.kube_sim import RESOURCES
from tests.support.kube_sim import SimulatedKubeAPI as FakeKube

__all__ = ["RESOURCES", "FakeKube"]
