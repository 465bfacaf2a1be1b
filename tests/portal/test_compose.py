"""Composition: schema-valid manifests, labels, spot diversity, datastore spread, golden output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import kubernetes_validate
import pytest

from portal import compose as c
from tests.portal.k8s_schema import crd_index, validate

GOLDEN = Path(__file__).parent / "golden"


def spec(**overrides) -> c.EnvironmentSpec:
    base = dict(
        request_id="env_golden0001",
        team="payments",
        name="checkout",
        namespace="payments-checkout",
        env_class="dev",
        ttl_hours=48,
        workload_class="standard",
        cpu=8,
        memory_gib=32,
        gpu=0,
        team_group="kiln:team:payments",
        gitops_repo_url="file:///srv/kiln/gitops.git",
    )
    base.update(overrides)
    return c.EnvironmentSpec(**base)


FULL = dict(tenant_control_plane=True, spot_node_pool=True, database=True, datastore="etcd-a")


def test_the_shared_crd_schemas_are_found():
    assert ("karpenter.sh", "v1", "NodePool") in crd_index()
    assert ("database.kiln.dev", "v1alpha1", "PostgreSQLInstance") in crd_index()


@pytest.mark.parametrize(
    "overrides",
    [{}, FULL, dict(FULL, spot_node_pool=False, gpu=2, env_class="prod", ttl_hours=2000)],
    ids=["minimal", "everything-spot", "prod-gpu-on-demand"],
)
def test_every_manifest_validates_against_its_schema(overrides):
    manifests = c.compose(spec(**overrides))
    for manifest in manifests:
        validate(manifest)
    kinds = [m["kind"] for m in manifests]
    assert kinds[0] == "Namespace" and kinds[-1] == "Application"


def test_the_validator_rejects_a_broken_manifest():
    nodepool = c.node_pool(spec(**FULL))
    nodepool["spec"]["template"]["spec"]["expireAfter"] = "two days"
    with pytest.raises(Exception, match="does not match"):
        validate(nodepool)
    quota = c.resource_quota(spec())
    quota["spec"]["hardd"] = quota["spec"].pop("hard")
    with pytest.raises(kubernetes_validate.ValidationError, match="hardd"):
        validate(quota)


def test_everything_carries_the_attribution_labels():
    for manifest in c.compose(spec(**FULL)):
        labels = manifest["metadata"]["labels"]
        assert labels["kiln.dev/team"] == "payments"
        assert labels["kiln.dev/env-class"] == "dev"
        assert labels["kiln.dev/ttl-class"] == "week"  # 48 h: more than a day, at most 7 days
        assert labels["kiln.dev/request-id"] == "env_golden0001"


def test_quota_includes_gpus_and_nodepool_expires_with_the_ttl():
    manifests = {m["kind"]: m for m in c.compose(spec(**dict(FULL, spot_node_pool=False, gpu=2)))}
    assert manifests["ResourceQuota"]["spec"]["hard"]["requests.nvidia.com/gpu"] == "2"
    pool = manifests["NodePool"]["spec"]
    assert pool["template"]["spec"]["expireAfter"] == "48h"
    assert pool["disruption"]["budgets"] == [{"nodes": "10%"}]
    assert pool["limits"]["nvidia.com/gpu"] == "2"


def test_spot_pool_is_diversified_and_refuses_too_few_types_or_zones():
    pool = c.node_pool(spec(**FULL))
    reqs = {r["key"]: r["values"] for r in pool["spec"]["template"]["spec"]["requirements"]}
    # Spot first; on-demand too, for the environment's latency-sensitive pods (never on spot).
    assert reqs["karpenter.sh/capacity-type"] == ["spot", "on-demand"]
    assert len(reqs["node.kubernetes.io/instance-type"]) >= 4
    assert len(reqs["topology.kubernetes.io/zone"]) >= 3
    with pytest.raises(c.CompositionError, match="4 instance types"):
        c.node_pool(
            spec(
                **FULL, spot_instance_types=("m6i.xlarge", "m5.xlarge", "m6i.xlarge", "c6i.xlarge")
            )
        )
    with pytest.raises(c.CompositionError):
        c.node_pool(spec(**FULL, zones=("a", "b")))


POOLS = [
    c.DatastorePool("etcd-a1", "zone-a", 2),
    c.DatastorePool("etcd-a2", "zone-a", 2),
    c.DatastorePool("etcd-b1", "zone-b", 1),
]


@pytest.mark.parametrize(
    "tenants, expected",
    [
        # empty: both labels at 0, zone-a sorts first, then etcd-a1 by name
        ({}, "etcd-a1"),
        # zone-a holds 1, zone-b 0: spread to zone-b
        ({"etcd-a1": 1}, "etcd-b1"),
        # zone-b is at its cap (1/1): only zone-a pools are open; a2 has fewer tenants
        ({"etcd-a1": 1, "etcd-b1": 1}, "etcd-a2"),
        # a1 full (2/2), a2 1, b1 full: a2
        ({"etcd-a1": 2, "etcd-a2": 1, "etcd-b1": 1}, "etcd-a2"),
    ],
    ids=["empty", "spread-to-other-label", "skip-full-label", "last-open-pool"],
)
def test_choose_datastore_spreads_by_label_under_a_hard_cap(tenants, expected):
    assert c.choose_datastore(POOLS, tenants).name == expected


def test_choose_datastore_refuses_when_every_pool_is_full():
    with pytest.raises(c.PoolsExhausted):
        c.choose_datastore(POOLS, {"etcd-a1": 2, "etcd-a2": 2, "etcd-b1": 1})


def test_cordon_zeroes_nodepool_limits_and_pods():
    out = {m["kind"]: m for m in c.cordon(c.compose(spec(**FULL)))}
    assert out["NodePool"]["spec"]["limits"] == {"cpu": "0", "memory": "0Gi"}
    assert out["ResourceQuota"]["spec"]["hard"]["pods"] == "0"
    for manifest in out.values():
        validate(manifest)


@pytest.mark.parametrize("name, overrides", [("minimal", {}), ("everything", FULL)])
def test_golden_output(name, overrides):
    path = GOLDEN / f"compose-{name}.json"
    got = json.dumps(c.compose(spec(**overrides)), indent=2, sort_keys=True) + "\n"
    if os.environ.get("KILN_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(got)
    assert got == path.read_text()


def test_shipped_crossplane_and_argocd_manifests_validate():
    import yaml
    from django.conf import settings

    deploy = Path(settings.BASE_DIR) / "deploy"
    files = sorted((deploy / "crossplane").glob("*.yaml")) + sorted(
        (deploy / "argocd").glob("*.yaml")
    )
    assert len(files) >= 4
    for path in files:
        validate(yaml.safe_load(path.read_text()))


def test_an_environment_with_its_own_pool_puts_every_pod_there_by_admission():
    manifests = {m["kind"]: m for m in c.compose(spec(**FULL))}
    ns = manifests["Namespace"]["metadata"]["annotations"]
    pool = manifests["NodePool"]
    # PodNodeSelector: every pod of the namespace selects the pool by its name ...
    assert ns[c.A_NODE_SELECTOR] == f"karpenter.sh/nodepool={pool['metadata']['name']}"
    # ... and PodTolerationRestriction gives it the toleration of the pool's only taint.
    [taint] = pool["spec"]["template"]["spec"]["taints"]
    assert json.loads(ns[c.A_DEFAULT_TOLERATIONS]) == [{**taint, "operator": "Equal"}]


def test_an_environment_without_its_own_pool_has_no_pool_annotations():
    ns = c.namespace(spec())
    assert c.A_NODE_SELECTOR not in ns["metadata"]["annotations"]
    assert c.A_DEFAULT_TOLERATIONS not in ns["metadata"]["annotations"]
