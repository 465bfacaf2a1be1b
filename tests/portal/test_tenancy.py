"""Tenant control planes: datastore pools with hard caps (parsed with a clear error), denial past
every cap, and what ships with each TenantControlPlane, validated against the schemas."""

from __future__ import annotations

import copy

import pytest
import yaml

from audit.models import OutboxEvent
from kiln.identity.models import Team
from portal import compose as c
from portal.lifecycle import Status
from portal.models import Environment, EnvironmentRequest
from portal.services import environment_request_submit
from portal.services.tenancy import DatastorePoolsMisconfigured
from tests.portal.conftest import request_data
from tests.portal.k8s_schema import validate
from tests.portal.test_compose import spec

TCP = dict(tenant_control_plane=True, datastore="etcd-a1")


def by_kind(manifests: list[dict]) -> dict[str, dict]:
    return {m["kind"]: m for m in manifests}


@pytest.mark.parametrize("env_class", ["dev", "prod"])
def test_the_control_plane_bundle_validates_against_kubernetes_and_kamaji_schemas(env_class):
    manifests = c.compose(spec(**TCP, env_class=env_class, ttl_hours=48))
    kinds = [m["kind"] for m in manifests]
    # The ConfigMap the API server mounts comes before the control plane; flow control too.
    assert kinds.index("ConfigMap") < kinds.index("TenantControlPlane")
    assert kinds.index("FlowSchema") < kinds.index("TenantControlPlane")
    for manifest in manifests:
        validate(manifest)


def test_the_validator_refuses_an_unknown_flow_schema_field():
    flow = by_kind(c.flow_control(spec(**TCP)))["FlowSchema"]
    broken = copy.deepcopy(flow)
    broken["spec"]["distinguisher"] = broken["spec"].pop("distinguisherMethod")
    with pytest.raises(Exception, match="distinguisher"):
        validate(broken)


def test_flow_schema_bounds_service_account_writes_per_user():
    objects = by_kind(c.flow_control(spec(**TCP)))
    flow, level = objects["FlowSchema"]["spec"], objects["PriorityLevelConfiguration"]["spec"]
    assert flow["distinguisherMethod"] == {"type": "ByUser"}
    assert (
        flow["priorityLevelConfiguration"]["name"]
        == objects["PriorityLevelConfiguration"]["metadata"]["name"]
    )
    # Matched before the built-in service-accounts schema (precedence 9000).
    assert flow["matchingPrecedence"] < 9000
    (rule,) = flow["rules"]
    assert rule["subjects"] == [
        {
            "kind": "ServiceAccount",
            "serviceAccount": {"namespace": "payments-checkout", "name": "*"},
        }
    ]
    assert set(rule["resourceRules"][0]["verbs"]) == {
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    }
    assert "get" not in rule["resourceRules"][0]["verbs"]  # reads are not throttled here
    assert level["type"] == "Limited" and level["limited"]["limitResponse"]["type"] == "Queue"
    assert level["limited"]["lendablePercent"] == 0  # its seats are not borrowed by others


def test_control_plane_has_konnectivity_cert_sans_resources_and_the_audit_sink():
    manifests = by_kind(c.compose(spec(**TCP)))
    tcp = manifests["TenantControlPlane"]["spec"]
    assert tcp["addons"]["konnectivity"]["agent"]["mode"] == "DaemonSet"
    assert tcp["addons"]["konnectivity"]["server"]["port"] == 8132
    assert tcp["networkProfile"]["certSANs"] == [
        "payments-checkout.tenants.kiln.internal",
        "payments-checkout.payments-checkout.svc",
        "payments-checkout.payments-checkout.svc.cluster.local",
    ]
    api = tcp["controlPlane"]["deployment"]["resources"]["apiServer"]
    assert api["limits"] == {"cpu": "1", "memory": "1Gi"}  # dev: the small size
    args = tcp["controlPlane"]["deployment"]["extraArgs"]["apiServer"]
    assert "--audit-policy-file=/etc/kiln/tenant-audit/policy.yaml" in args
    assert "--audit-webhook-config-file=/etc/kiln/tenant-audit/webhook.kubeconfig" in args
    volume = tcp["controlPlane"]["deployment"]["additionalVolumes"][0]
    assert volume["configMap"]["name"] == manifests["ConfigMap"]["metadata"]["name"]
    data = manifests["ConfigMap"]["data"]
    policy = yaml.safe_load(data["policy.yaml"])
    assert policy["apiVersion"] == "audit.k8s.io/v1" and policy["kind"] == "Policy"
    # Secrets are audited as metadata only: their content never reaches the archive.
    secrets = next(
        r
        for r in policy["rules"]
        if any("secrets" in g["resources"] for g in r.get("resources", []))
    )
    assert secrets["level"] == "Metadata"
    webhook = yaml.safe_load(data["webhook.kubeconfig"])
    assert webhook["clusters"][0]["cluster"]["server"] == (
        "https://kiln.kiln-system.svc/hooks/tenant-audit/env_golden0001/"
    )
    prod = by_kind(c.compose(spec(**TCP, env_class="prod", ttl_hours=48)))["TenantControlPlane"]
    assert prod["spec"]["controlPlane"]["deployment"]["resources"]["apiServer"]["limits"] == {
        "cpu": "2",
        "memory": "4Gi",
    }


@pytest.mark.parametrize("env_class", ["dev", "prod"])
def test_the_tenant_api_servers_own_flow_control_validates_and_bounds_every_service_account(
    env_class,
):
    objects = c.tenant_flow_control(spec(**TCP, env_class=env_class, ttl_hours=48))
    for manifest in objects:
        validate(manifest)
        assert "namespace" not in manifest["metadata"]  # cluster-scoped, in the tenant's cluster
    by = by_kind(objects)
    flow = by["FlowSchema"]["spec"]
    assert flow["distinguisherMethod"] == {"type": "ByUser"}
    assert (
        flow["priorityLevelConfiguration"]["name"]
        == by["PriorityLevelConfiguration"]["metadata"]["name"]
    )
    # Inside the tenant's API server: every service account of every namespace there.
    assert flow["rules"][0]["subjects"] == [
        {"kind": "Group", "group": {"name": "system:serviceaccounts"}}
    ]
    assert flow["rules"][0]["resourceRules"][0]["namespaces"] == ["*"]
    assert "get" not in flow["rules"][0]["resourceRules"][0]["verbs"]
    limited = by["PriorityLevelConfiguration"]["spec"]["limited"]
    assert limited["nominalConcurrencyShares"] == (20 if env_class == "prod" else 10)
    # Not part of the host cluster's plan: written through the tenant API server instead.
    planned = {(m["kind"], m["metadata"]["name"]) for m in c.compose(spec(**TCP))}
    assert not planned & {(m["kind"], m["metadata"]["name"]) for m in objects}


def test_the_webhook_token_is_a_mounted_secret_file_never_in_the_plan():
    manifests = c.compose(spec(**TCP))
    deployment = by_kind(manifests)["TenantControlPlane"]["spec"]["controlPlane"]["deployment"]
    webhook = yaml.safe_load(by_kind(manifests)["ConfigMap"]["data"]["webhook.kubeconfig"])
    (user,) = webhook["users"]
    assert user["user"] == {"tokenFile": "/etc/kiln/tenant-audit-token/token"}
    assert "token" not in user["user"]  # no credential in a ConfigMap, or in Git
    secret = c.audit_token_secret_name(spec(**TCP))
    volume = next(v for v in deployment["additionalVolumes"] if "secret" in v)
    assert volume["secret"] == {"secretName": secret}
    mount = next(
        m for m in deployment["additionalVolumeMounts"]["apiServer"] if m["name"] == volume["name"]
    )
    assert user["user"]["tokenFile"] == f"{mount['mountPath']}/{c.TOKEN_KEY}"
    assert "Secret" not in {m["kind"] for m in manifests}


def test_teardown_removes_the_cluster_scoped_flow_control_with_the_control_plane():
    assert {"FlowSchema", "PriorityLevelConfiguration", "TenantControlPlane"} <= set(
        c.CONTROL_PLANE_KINDS
    )


@pytest.mark.parametrize(
    "raw, reason",
    [
        ("", "no datastore pool"),
        ("etcd-a1:zone-a", "expected name:label:cap"),
        ("etcd-a1:zone-a:30:x", "expected name:label:cap"),
        ("Etcd_A:zone-a:30", "name must be a DNS-1123 label"),
        ("etcd-a1::30", "label must be a DNS-1123 label"),
        ("etcd-a1:zone-a:thirty", "cap must be a whole number"),
        ("etcd-a1:zone-a:0", "cap must be a whole number"),
        ("etcd-a1:zone-a:-3", "cap must be a whole number"),
        ("etcd-a1:zone-a:²", "cap must be a whole number"),
        ("etcd-a1:zone-a:30,etcd-a1:zone-b:30", "given twice"),
        ("etcd-a1:zone-a:30,", "entry 2"),
    ],
    ids=[
        "empty",
        "two-parts",
        "four-parts",
        "bad-name",
        "empty-label",
        "word-cap",
        "zero-cap",
        "negative-cap",
        "superscript-digit",
        "duplicate",
        "trailing-comma",
    ],
)
def test_a_pool_spec_that_does_not_parse_is_refused_with_the_reason(raw, reason):
    with pytest.raises(c.DatastorePoolSpecInvalid, match=reason):
        c.parse_datastore_pools(raw)


def test_a_pool_spec_parses_into_pools():
    assert c.parse_datastore_pools(" etcd-a1:zone-a:2 , etcd-b1:zone-b:1") == [
        c.DatastorePool("etcd-a1", "zone-a", 2),
        c.DatastorePool("etcd-b1", "zone-b", 1),
    ]


@pytest.mark.django_db
def test_submission_reserves_pools_and_denies_past_every_cap(people, settings):
    settings.KILN_DATASTORE_POOLS = "etcd-a1:zone-a:1,etcd-b1:zone-b:1"
    first, _ = environment_request_submit(
        actor=people["alice"], data=request_data(name="one", tenant_control_plane=True)
    )
    second, _ = environment_request_submit(
        actor=people["alice"], data=request_data(name="two", tenant_control_plane=True)
    )
    # Spread across labels, one tenant each: both pools are now at their cap.
    assert {first.datastore_pool, second.datastore_pool} == {"etcd-a1", "etcd-b1"}
    third, _ = environment_request_submit(
        actor=people["alice"], data=request_data(name="three", tenant_control_plane=True)
    )
    third.refresh_from_db()
    assert third.status == Status.DENIED and third.datastore_pool == ""
    assert "every datastore pool is at its cap (etcd-a1 1/1, etcd-b1 1/1)" in third.status_reason
    denied = OutboxEvent.objects.get(
        target=f"portal.environment:{third.public_id}", action="portal.environment.denied"
    )
    assert "datastore pool" in denied.data["reason"]
    # A request without a control plane is not affected by the pools.
    plain, _ = environment_request_submit(actor=people["alice"], data=request_data(name="four"))
    assert plain.status != Status.DENIED


@pytest.mark.django_db
def test_a_pool_spec_that_does_not_parse_refuses_the_request_and_changes_nothing(people, settings):
    settings.KILN_DATASTORE_POOLS = "etcd-a1:zone-a:lots"
    with pytest.raises(DatastorePoolsMisconfigured, match="entry 1.*cap must be a whole number"):
        environment_request_submit(
            actor=people["alice"], data=request_data(tenant_control_plane=True)
        )
    assert not Environment.objects.exists() and not EnvironmentRequest.objects.exists()
    assert not OutboxEvent.objects.exists()


@pytest.mark.django_db
def test_the_api_answers_a_broken_pool_spec_with_503_and_the_reason(api_client_for, settings):
    Team.objects.create(slug="payments", name="Payments")
    settings.KILN_DATASTORE_POOLS = "etcd-a1:zone-a"
    alice = api_client_for("engineer", sub="alice", team="payments")
    body = {
        "team": "payments",
        "name": "checkout",
        "env_class": "dev",
        "ttl_hours": 48,
        "cpu": 4,
        "memory_gib": 16,
        "tenant_control_plane": True,
    }
    response = alice.post("/api/v1/environments/", body, format="json")
    assert response.status_code == 503
    assert response.json()["code"] == "datastore_pools_invalid"
    assert "expected name:label:cap" in response.json()["message"]
    assert not Environment.objects.exists()
