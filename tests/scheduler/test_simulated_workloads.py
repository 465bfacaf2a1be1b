"""The simulated workload controllers and the demo cluster: StatefulSets and Jobs get pods, each new
environment is seeded once (unless it asks not to be), tenant control planes run on the
management pool only."""

from __future__ import annotations

import random

import pytest

from audit.models import OutboxEvent
from kiln.cluster import AppliedRef
from kiln.cluster.nodes import labels_of, name_of, node_list, pod_list, pod_node, pod_phase
from scheduler.simulation import cluster_tick
from scheduler.simulation.demo import (
    MANAGEMENT_NAMESPACE,
    MANAGEMENT_POOL,
    MARKER,
    demo_cluster_reconcile,
)
from scheduler.simulation.workloads import A_RUN_SECONDS, workloads_reconcile
from tests.scheduler.conftest import NS_ENV, environment_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(settings):
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    return environment_cluster()


def _template(cls: str = "batch", annotations: dict | None = None) -> dict:
    return {
        "metadata": {
            "labels": {"app": "t", "kiln.dev/workload-class": cls},
            "annotations": annotations or {},
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
            "tolerations": [{"key": "kiln.dev/environment", "operator": "Exists"}],
        },
    }


def test_a_statefulset_keeps_its_ordinals_and_replaces_a_lost_one_by_name(backend):
    backend.apply(
        [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "db", "namespace": NS_ENV},
                "spec": {"replicas": 2, "template": _template()},
            }
        ]
    )
    workloads_reconcile(backend=backend)
    names = sorted(name_of(p) for p in pod_list(backend, namespace=NS_ENV) if "db-" in name_of(p))
    assert names == ["db-0", "db-1"]
    backend.delete(AppliedRef("v1", "Pod", NS_ENV, "db-1"))
    made = workloads_reconcile(backend=backend)
    assert made.created == [f"{NS_ENV}/db-1"]


def test_a_job_runs_parallelism_pods_until_its_completions_succeed(backend):
    backend.apply(
        [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "etl", "namespace": NS_ENV},
                "spec": {
                    "parallelism": 2,
                    "completions": 3,
                    "template": _template(annotations={A_RUN_SECONDS: "0"}),
                },
            }
        ]
    )

    def job_pods():
        return [p for p in pod_list(backend, namespace=NS_ENV) if name_of(p).startswith("etl-")]

    cluster_tick(backend=backend, seconds=0.0, rng=random.Random(1), demo=False)
    assert len(job_pods()) == 2 and all(pod_node(p) for p in job_pods())
    for _ in range(4):  # a pod that ran its seconds succeeds; the Job starts the next
        cluster_tick(backend=backend, seconds=0.0, rng=random.Random(1), demo=False)
    phases = sorted(pod_phase(p) for p in job_pods())
    assert phases.count("Succeeded") == 3 and len(phases) == 3


def test_each_new_environment_is_seeded_once_unless_it_asks_not_to_be(backend):
    backend.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": "quiet-dev",
                    "labels": {
                        "kiln.dev/environment": "quiet-dev",
                        "kiln.dev/demo-workload": "false",
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "fresh-dev", "labels": {"kiln.dev/environment": "fresh-dev"}},
            },
        ]
    )
    # team-a-dev was seeded by the fixture (its marker is there); fresh-dev is new.
    assert demo_cluster_reconcile(backend=backend, seed_workloads=True) == {"seeded": ["fresh-dev"]}
    assert backend.get("v1", "ConfigMap", "fresh-dev", MARKER) is not None
    assert backend.list("apps/v1", "Deployment", "quiet-dev") == []
    assert {name_of(d) for d in backend.list("apps/v1", "Deployment", "fresh-dev")} == {
        "demo-web",
        "demo-batch",
    }
    seeded = OutboxEvent.objects.filter(action="scheduler.demo_workload.seeded")
    assert [e.target for e in seeded] == ["namespace:fresh-dev"]
    # A workload someone deleted stays deleted: the marker says the namespace was seeded.
    backend.delete(AppliedRef("apps/v1", "Deployment", "fresh-dev", "demo-web"))
    assert demo_cluster_reconcile(backend=backend, seed_workloads=True) == {"seeded": []}


class _ReaperBetweenListAndApply:
    """The real simulated backend, with the reaper deleting a namespace right after it is listed."""

    def __init__(self, backend, doomed: str):
        self._backend, self._doomed = backend, doomed

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def list(self, api_version, kind, *args, **kwargs):
        found = self._backend.list(api_version, kind, *args, **kwargs)
        if kind == "Namespace" and self._doomed:
            self._backend.delete(AppliedRef("v1", "Namespace", "", self._doomed))
            self._doomed = ""
        return found


def test_a_namespace_torn_down_between_the_list_and_the_seed_is_skipped_not_an_error(
    backend, settings
):
    settings.KILN_SIM_DELAY_PROFILE = "fast"  # the namespace stays terminating for a while
    env = {"kiln.dev/environment": "x"}
    backend.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": env}}
            for n in ("doomed-dev", "fresh-dev")
        ]
    )
    racing = _ReaperBetweenListAndApply(backend, "doomed-dev")
    report = demo_cluster_reconcile(backend=racing, seed_workloads=True)
    assert report["seeded"] == ["fresh-dev"]
    assert report["skipped"] == ["doomed-dev: namespace doomed-dev is terminating"]
    assert backend.list("apps/v1", "Deployment", "doomed-dev") == []
    seeded = OutboxEvent.objects.filter(action="scheduler.demo_workload.seeded")
    assert [e.target for e in seeded] == ["namespace:fresh-dev"]


def test_tenant_control_planes_run_on_the_management_pool_and_nothing_else_does(backend):
    backend.apply(
        [
            {
                "apiVersion": "kamaji.clastix.io/v1alpha1",
                "kind": "TenantControlPlane",
                "metadata": {"name": "tcp", "namespace": NS_ENV},
                "spec": {},
            }
        ]
    )
    report = cluster_tick(backend=backend, seconds=0.0, rng=random.Random(1), demo=True)
    assert report["unschedulable"] == 0, report
    nodes = {name_of(n): labels_of(n) for n in node_list(backend)}
    planes = pod_list(backend, namespace=MANAGEMENT_NAMESPACE)
    assert len(planes) == 2
    assert {nodes[pod_node(p)]["karpenter.sh/nodepool"] for p in planes} == {MANAGEMENT_POOL}
    tenants = [p for p in pod_list(backend) if labels_of(p).get("app", "").startswith("demo-")]
    assert tenants and all(
        nodes[pod_node(p)]["karpenter.sh/nodepool"] != MANAGEMENT_POOL for p in tenants
    )
    # The control plane goes with its TenantControlPlane.
    backend.delete(AppliedRef("kamaji.clastix.io/v1alpha1", "TenantControlPlane", NS_ENV, "tcp"))
    demo_cluster_reconcile(backend=backend, seed_workloads=False)
    assert backend.list("apps/v1", "Deployment", MANAGEMENT_NAMESPACE) == []


def test_a_namespace_being_deleted_under_a_pass_holds_back_only_its_own_workloads(backend):
    """Teardown may delete a namespace between the pass's reads and its writes (another process);
    the API server then refuses new objects there. The pass goes on with the other namespaces,
    as a controller does, and the next one sees the namespace gone."""
    from django.utils import timezone

    from kiln.cluster.models import SimulatedObject

    backend.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "going"}}])
    for namespace in (NS_ENV, "going"):
        backend.apply(
            [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": namespace},
                    "spec": {"replicas": 1, "template": _template("standard")},
                },
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": "once", "namespace": namespace},
                    "spec": {"parallelism": 1, "completions": 1, "template": _template()},
                },
            ]
        )
    # The race's state: the Namespace is deleting, its contents not yet marked.
    SimulatedObject.objects.filter(kind="Namespace", name="going").update(
        deletion_timestamp=timezone.now()
    )
    made = workloads_reconcile(backend=backend)
    assert made.created and all(name.startswith(f"{NS_ENV}/") for name in made.created)
    assert not [p for p in pod_list(backend, namespace="going")]
