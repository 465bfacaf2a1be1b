"""The tests' local Kubernetes API server: kiln/cluster/kube_sim.py, under the name tests use."""

from kiln.cluster.kube_sim import RESOURCES
from kiln.cluster.kube_sim import SimulatedKubeAPI as FakeKube

__all__ = ["RESOURCES", "FakeKube"]
