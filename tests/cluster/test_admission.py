"""The admission plugins the simulated cluster runs on new pods (PodNodeSelector,
PodTolerationRestriction): a namespace's annotations put its pods on its node pool."""

from __future__ import annotations

import json

import pytest

from kiln.cluster.admission import (
    A_DEFAULT_TOLERATIONS,
    A_NODE_SELECTOR,
    admit_pod,
    default_tolerations,
    node_selector,
)
from kiln.cluster.simulated import SimulatedBackend

TOLERATION = {
    "key": "kiln.dev/environment",
    "operator": "Equal",
    "value": "ns",
    "effect": "NoSchedule",
}
ANNOTATIONS = {
    A_NODE_SELECTOR: "karpenter.sh/nodepool=kiln-ns",
    A_DEFAULT_TOLERATIONS: json.dumps([TOLERATION]),
}


def test_a_pod_gets_the_namespaces_selector_and_toleration_and_keeps_its_own():
    pod = {"spec": {"nodeSelector": {"disk": "ssd"}, "tolerations": [{"operator": "Exists"}]}}
    admitted = admit_pod(pod, ANNOTATIONS)
    assert admitted["spec"]["nodeSelector"] == {"disk": "ssd", "karpenter.sh/nodepool": "kiln-ns"}
    assert admitted["spec"]["tolerations"] == [{"operator": "Exists"}, TOLERATION]
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}  # the input is not changed


def test_a_pod_cannot_select_its_way_off_the_namespaces_pool():
    pod = {"spec": {"nodeSelector": {"karpenter.sh/nodepool": "kiln-general"}}}
    assert admit_pod(pod, ANNOTATIONS)["spec"]["nodeSelector"] == {
        "karpenter.sh/nodepool": "kiln-ns"
    }


def test_a_toleration_already_there_is_not_added_twice():
    pod = {"spec": {"tolerations": [TOLERATION]}}
    assert admit_pod(pod, ANNOTATIONS)["spec"]["tolerations"] == [TOLERATION]


@pytest.mark.parametrize(
    "annotations",
    [{}, {A_NODE_SELECTOR: ""}, {A_DEFAULT_TOLERATIONS: "not json"}, {A_DEFAULT_TOLERATIONS: "{}"}],
    ids=["none", "empty-selector", "bad-json", "not-a-list"],
)
def test_unreadable_or_missing_annotations_change_nothing(annotations):
    pod = {"spec": {}}
    assert admit_pod(pod, annotations) is pod
    assert node_selector(annotations) == {} and default_tolerations(annotations) == []


@pytest.mark.django_db
def test_the_simulated_cluster_admits_new_pods_of_an_annotated_namespace():
    b = SimulatedBackend()
    b.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "ns", "annotations": ANNOTATIONS},
            }
        ]
    )
    b.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {"containers": []},
            }
        ]
    )
    b.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "q", "namespace": "other"},
                "spec": {"containers": []},
            }
        ]
    )
    pod = b.get("v1", "Pod", "ns", "p")
    assert pod["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": "kiln-ns"}
    assert pod["spec"]["tolerations"] == [TOLERATION]
    assert "nodeSelector" not in b.get("v1", "Pod", "other", "q")["spec"]
