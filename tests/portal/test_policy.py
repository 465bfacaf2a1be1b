"""The CEL policy gate over Kyverno ValidatingPolicy files: allow, deny, and every fail-closed path."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from portal import compose as c
from portal import policy as p
from scheduler.seed import INSTANCE_TYPES
from tests.portal.k8s_schema import validate

POLICIES = Path(settings.BASE_DIR) / "deploy" / "policies"


def request_doc(**spec_overrides) -> dict:
    spec = {
        "team": "payments",
        "name": "checkout",
        "envClass": "dev",
        "ttlHours": 48,
        "workloadClass": "standard",
        "resources": {"cpu": 4, "memoryGi": 16, "gpu": 0},
        "components": {
            "namespace": True,
            "tenantControlPlane": False,
            "spotNodePool": False,
            "database": False,
        },
        "justification": "",
        "requester": {"username": "alice", "roles": ["engineer"], "teams": ["payments"]},
    }
    spec.update(spec_overrides)
    return {
        "apiVersion": "kiln.dev/v1alpha1",
        "kind": "EnvironmentRequest",
        "metadata": {"name": "checkout", "namespace": "payments"},
        "spec": spec,
        "status": {
            "teamUsage": {"cpu": 10, "memoryGi": 40, "gpu": 0, "environments": 2},
            "teamLimits": {"cpu": 64, "memoryGi": 256, "gpu": 4, "environments": 10},
        },
    }


def request_set() -> p.PolicySet:
    return p.load_policy_set(POLICIES / "request", "request")


def manifest_set() -> p.PolicySet:
    return p.load_policy_set(POLICIES / "manifests", "manifests")


def test_every_policy_file_is_a_valid_kyverno_validatingpolicy():
    files = sorted(POLICIES.glob("*/*.yaml"))
    assert len(files) >= 10
    for path in files:
        doc = yaml.safe_load(path.read_text())
        assert doc["apiVersion"] == "policies.kyverno.io/v1"
        validate(doc)


def test_a_reasonable_request_is_allowed_and_the_version_pins_file_hashes():
    result = p.evaluate(request_set(), [request_doc()])
    assert result.allowed, result.summary()
    assert len(result.version) == 64
    assert all(len(v.sha256) == 64 for v in result.verdicts)


@pytest.mark.parametrize(
    "overrides, policy, fragment",
    [
        (
            {"envClass": "ephemeral", "ttlHours": 100},
            "kiln-request-ttl-per-class",
            "exceeds the ephemeral limit of 72h",
        ),
        (
            {"resources": {"cpu": 4, "memoryGi": 16, "gpu": 3}},
            "kiln-request-gpu-limits",
            "3 GPUs exceed the dev limit of 2",
        ),
        (
            {"envClass": "prod", "ttlHours": 100, "justification": "short"},
            "kiln-request-prod-requesters",
            "justification",
        ),
        (
            {"envClass": "staging", "components": {"spotNodePool": True}},
            "kiln-request-spot-classes",
            "not staging",
        ),
        (
            {"workloadClass": "latency-sensitive", "components": {"spotNodePool": True}},
            "kiln-request-spot-classes",
            "never run on spot",
        ),
        (
            {"resources": {"cpu": 60, "memoryGi": 16, "gpu": 0}},
            "kiln-request-team-quota",
            "team CPU quota: 10 in use + 60 asked > 64",
        ),
    ],
    ids=[
        "ttl-over-class",
        "gpu-over-class",
        "prod-justification",
        "spot-staging",
        "spot-latency",
        "team-cpu-quota",
    ],
)
def test_request_policies_deny_with_a_reason(overrides, policy, fragment):
    result = p.evaluate(request_set(), [request_doc(**overrides)])
    assert not result.allowed
    assert any(
        v.policy == policy and v.outcome == p.DENY and fragment in v.message for v in result.denials
    ), result.summary()


def test_composed_manifests_pass_the_manifest_policies():
    spec = c.EnvironmentSpec(
        request_id="env_x",
        team="payments",
        name="a",
        namespace="payments-a",
        env_class="dev",
        ttl_hours=24,
        workload_class="batch",
        cpu=4,
        memory_gib=8,
        tenant_control_plane=True,
        spot_node_pool=True,
        database=True,
        datastore="etcd-a",
    )
    result = p.evaluate(manifest_set(), c.compose(spec))
    assert result.allowed, result.summary()
    assert {v.policy for v in result.verdicts} >= {
        "kiln-namespace-labels",
        "kiln-spot-nodepools-diversified",
        "kiln-attribution",
    }


def test_manifest_policies_deny_an_undiversified_spot_pool_and_a_privileged_pod():
    spec = c.EnvironmentSpec(
        request_id="env_x",
        team="payments",
        name="a",
        namespace="payments-a",
        env_class="dev",
        ttl_hours=24,
        workload_class="batch",
        cpu=4,
        memory_gib=8,
        spot_node_pool=True,
    )
    pool = c.node_pool(spec)
    pool["spec"]["template"]["spec"]["requirements"][1]["values"] = ["m6i.xlarge", "m5.xlarge"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x", "namespace": "payments-a"},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        },
    }
    namespace = c.namespace(spec)
    del namespace["metadata"]["labels"]["kiln.dev/ttl-class"]
    result = p.evaluate(manifest_set(), [pool, pod, namespace])
    denied = {(v.policy, v.outcome) for v in result.denials}
    assert ("kiln-spot-nodepools-diversified", p.DENY) in denied
    assert ("kiln-no-privileged", p.DENY) in denied
    assert ("kiln-namespace-labels", p.DENY) in denied


@pytest.mark.parametrize(
    ("annotations", "denied"),
    [
        (None, False),
        ({}, False),
        ({"kiln.dev/do-not-disrupt": "end-to-end suite running"}, False),
        ({"kiln.dev/terminate-check": "/ready"}, False),
        ({"kiln.dev/do-not-disrupt": ""}, True),
        ({"kiln.dev/do-not-disrupt": "   "}, True),
    ],
    ids=["no-annotations", "empty-annotations", "with-reason", "other", "empty", "blank"],
)
def test_a_do_not_disrupt_hold_without_a_reason_is_refused_at_admission(annotations, denied):
    metadata = {"name": "app", "namespace": "payments-a"}
    if annotations is not None:
        metadata["annotations"] = annotations
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {"selector": {"matchLabels": {"app": "app"}}, "template": {}},
    }
    result = p.evaluate(manifest_set(), [deployment])
    verdicts = [v for v in result.verdicts if v.policy == "kiln-do-not-disrupt-reason"]
    assert verdicts, "the policy matched the Deployment"
    assert [v.outcome == p.DENY for v in verdicts] == [denied]
    if denied:
        assert "needs a reason" in verdicts[0].message


def _policy_dir(tmp_path: Path, expression: str, name: str = "custom") -> Path:
    doc = {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": name},
        "spec": {
            "validationActions": ["Deny"],
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["kiln.dev"],
                        "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE"],
                        "resources": ["environmentrequests"],
                    }
                ]
            },
            "validations": [{"expression": expression, "message": "custom"}],
        },
    }
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


@pytest.mark.parametrize(
    "expression, fragment",
    [
        ("object.spec.noSuchField == 1", "evaluation error"),
        (
            "resource.List('v1', 'pods', '').items.size() == 0",
            "evaluation error",
        ),  # Kyverno library: unsupported
        ("object.spec.ttlHours", "not a boolean"),
        ("1 / 0 == 1", "evaluation error"),
        ("object.spec.ttlHours >", "evaluation error"),  # does not compile
    ],
    ids=[
        "missing-field",
        "unsupported-function",
        "non-boolean",
        "division-by-zero",
        "syntax-error",
    ],
)
def test_errors_deny(tmp_path, expression, fragment):
    result = p.evaluate(p.load_policy_set(_policy_dir(tmp_path, expression), "t"), [request_doc()])
    assert not result.allowed
    [verdict] = result.verdicts
    assert verdict.outcome == p.ERROR and fragment in verdict.message


def test_a_timeout_denies_every_policy(tmp_path):
    slow = (
        "[" + ",".join(["1"] * 60) + "].all(a, [" + ",".join(["1"] * 60) + "].all(b, a + b == 2))"
    )
    result = p.evaluate(
        p.load_policy_set(_policy_dir(tmp_path, slow), "t"), [request_doc()], timeout_seconds=0.01
    )
    assert not result.allowed
    assert [v.outcome for v in result.verdicts] == [p.TIMEOUT]


def test_a_missing_or_empty_policy_set_raises(tmp_path):
    with pytest.raises(p.PolicySetMissing):
        p.load_policy_set(tmp_path / "nope", "request")
    with pytest.raises(p.PolicySetMissing):
        p.load_policy_set(tmp_path, "request")


def test_an_unparsable_or_foreign_policy_file_denies(tmp_path):
    shutil.copy(POLICIES / "request" / "ttl-per-class.yaml", tmp_path)
    (tmp_path / "broken.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    result = p.evaluate(p.load_policy_set(tmp_path, "t"), [request_doc()])
    assert not result.allowed
    assert any(v.outcome == p.ERROR and "ValidatingPolicy" in v.message for v in result.denials)


@pytest.mark.parametrize("env_class", ["ephemeral", "dev", "staging", "prod"])
def test_ttl_policy_and_the_input_limit_agree(env_class):
    from portal.conf import MAX_TTL_HOURS

    limit = MAX_TTL_HOURS[env_class]
    # prod needs a justification from a team engineer; give every class one so only the TTL decides.
    justification = "a justification long enough for prod"
    at_limit = p.evaluate(
        request_set(),
        [request_doc(envClass=env_class, ttlHours=limit, justification=justification)],
    )
    over = p.evaluate(
        request_set(),
        [request_doc(envClass=env_class, ttlHours=limit + 1, justification=justification)],
    )
    assert at_limit.allowed, at_limit.summary()
    assert [v.policy for v in over.denials] == ["kiln-request-ttl-per-class"]


def _pool_spec() -> c.EnvironmentSpec:
    return c.EnvironmentSpec(
        request_id="env_x",
        team="payments",
        name="a",
        namespace="payments-a",
        env_class="dev",
        ttl_hours=24,
        workload_class="batch",
        cpu=4,
        memory_gib=8,
        spot_node_pool=True,
    )


def test_a_nodepool_with_an_unknown_instance_type_is_denied_before_delivery():
    pool = c.node_pool(_pool_spec())
    types = pool["spec"]["template"]["spec"]["requirements"][1]["values"]
    pool["spec"]["template"]["spec"]["requirements"][1]["values"] = [*types, "z9.mega"]
    result = p.evaluate(manifest_set(), [pool])
    denied = {(v.policy, v.outcome): v.message for v in result.denials}
    assert ("kiln-nodepool-known-instance-types", p.DENY) in denied
    assert "instance types Kiln prices" in denied[("kiln-nodepool-known-instance-types", p.DENY)]
    # The composed pool (every default type priced) passes the same policy.
    assert p.evaluate(manifest_set(), [c.node_pool(_pool_spec())]).allowed


def test_the_known_instance_types_policy_lists_exactly_the_priced_types():
    doc = yaml.safe_load(
        (POLICIES / "manifests" / "nodepool-known-instance-types.yaml").read_text()
    )
    expression = doc["spec"]["variables"][0]["expression"]
    listed = set(re.findall(r"'([^']+)'", expression))
    assert listed == {row[0] for row in INSTANCE_TYPES}
    spec_types = (
        set(c.DEFAULT_SPOT_TYPES) | set(c.DEFAULT_ON_DEMAND_TYPES) | set(c.DEFAULT_GPU_TYPES)
    )
    assert spec_types <= listed
