"""The gate's CEL runner (transpiled to Python) against cel-python's reference interpreter, on
every policy file under deploy/policies: the same verdicts on well-formed objects, and on damaged
ones never more permissive (where the interpreter quietly treats `has()` on a string as false,
the transpiled code reports an error, as Kubernetes' CEL does, and the gate denies)."""

from __future__ import annotations

import copy

import celpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal import compose as c
from portal import policy as p
from tests.portal.test_policy import manifest_set, request_doc, request_set


def interpreted_verdicts(policy_set: p.PolicySet, objects: list[dict], monkeypatch) -> list:
    with monkeypatch.context() as m:
        m.setattr(p, "_env", celpy.Environment())
        m.setattr(p, "_compiled", {})
        return verdicts(policy_set, objects)


def verdicts(policy_set: p.PolicySet, objects: list[dict]) -> list[tuple]:
    result = []
    for i, obj in enumerate(objects):
        for pf in policy_set.files:
            v = p.evaluate_policy(pf, obj, {})
            if v is not None:
                result.append((v.policy, i, v.allowed, v.outcome))
    return result


def assert_no_more_permissive(transpiled: list[tuple], interpreted: list[tuple]) -> None:
    """Per policy and object: what the interpreter denies the transpiler denies, and where both
    decide without an error they decide alike. (No verdict: the policy did not select it.)"""
    ours = {(policy, i): (allowed, outcome) for policy, i, allowed, outcome in transpiled}
    reference = {(policy, i): (allowed, outcome) for policy, i, allowed, outcome in interpreted}
    for key in ours.keys() | reference.keys():
        mine, theirs = ours.get(key), reference.get(key)
        if theirs is not None and not theirs[0]:
            assert mine is not None and not mine[0], (key, mine, theirs)
        if mine is not None and theirs is not None and p.ERROR not in (mine[1], theirs[1]):
            assert mine == theirs, (key, mine, theirs)


def composed(env_class: str, flags: tuple[bool, bool, bool], gpu: int) -> list[dict]:
    tcp, spot, database = flags
    return c.compose(
        c.EnvironmentSpec(
            request_id="env_x",
            team="payments",
            name="a",
            namespace="payments-a",
            env_class=env_class,
            ttl_hours=24,
            workload_class="batch" if spot else "standard",
            cpu=4,
            memory_gib=8,
            gpu=gpu,
            tenant_control_plane=tcp,
            spot_node_pool=spot,
            database=database,
            datastore="etcd-a" if tcp else "",
        )
    )


def paths(node, prefix=()):
    """Every key path and list index path in a JSON document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield (*prefix, i)
            yield from paths(value, (*prefix, i))


def damaged(obj: dict, path: tuple, how: str) -> dict:
    """A copy of obj with the node at path removed or replaced by a value of another type."""
    out = copy.deepcopy(obj)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    replacement = {"drop": None, "empty": {}, "string": "x", "number": 0, "true": True}[how]
    if how == "drop":
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return out


HOW = st.sampled_from(["drop", "empty", "string", "number", "true"])


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    env_class=st.sampled_from(["ephemeral", "dev", "staging", "prod"]),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    gpu=st.integers(0, 2),
    pick=st.integers(0, 10_000),
    how=HOW,
)
def test_manifest_verdicts_match_the_interpreter(monkeypatch, env_class, flags, gpu, pick, how):
    manifests = composed(env_class, flags, gpu)
    policy_set = manifest_set()
    assert verdicts(policy_set, manifests) == interpreted_verdicts(
        policy_set, manifests, monkeypatch
    )
    target = manifests[pick % len(manifests)]
    candidates = [q for q in paths(target) if q[0] != "apiVersion" and q[0] != "kind"]
    broken = [damaged(target, candidates[pick % len(candidates)], how)]
    assert_no_more_permissive(
        verdicts(policy_set, broken), interpreted_verdicts(policy_set, broken, monkeypatch)
    )


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    env_class=st.sampled_from(["ephemeral", "dev", "staging", "prod", "qa"]),
    ttl=st.integers(-1, 2000),
    cpu=st.integers(0, 100),
    gpu=st.integers(0, 9),
    spot=st.booleans(),
    workload=st.sampled_from(["standard", "batch", "latency-sensitive", ""]),
    roles=st.sets(st.sampled_from(["engineer", "approver", "admin"])),
    justification=st.text(max_size=40),
    pick=st.integers(0, 10_000),
    how=HOW,
    damage=st.booleans(),
)
def test_request_verdicts_match_the_interpreter(
    monkeypatch, env_class, ttl, cpu, gpu, spot, workload, roles, justification, pick, how, damage
):
    doc = request_doc(
        envClass=env_class,
        ttlHours=ttl,
        workloadClass=workload,
        resources={"cpu": cpu, "memoryGi": 16, "gpu": gpu},
        components={"namespace": True, "tenantControlPlane": False, "spotNodePool": spot},
        justification=justification,
        requester={"username": "alice", "roles": sorted(roles), "teams": ["payments"]},
    )
    policy_set = request_set()
    if not damage:
        assert verdicts(policy_set, [doc]) == interpreted_verdicts(policy_set, [doc], monkeypatch)
        return
    candidates = [q for q in paths(doc) if q[0] not in ("apiVersion", "kind")]
    broken = [damaged(doc, candidates[pick % len(candidates)], how)]
    assert_no_more_permissive(
        verdicts(policy_set, broken), interpreted_verdicts(policy_set, broken, monkeypatch)
    )


def test_the_engine_is_the_transpiler_and_has_yields_a_cel_bool():
    assert isinstance(p._env, celpy.Environment)
    assert p._env.runner_class is p._TranspiledRunner
    program = p._program("has(object.a) && has(object.b) || !has(object.c)")
    value = program.evaluate({"object": celpy.json_to_cel({"a": 1, "b": 2})})
    assert isinstance(value, celpy.celtypes.BoolType) and value


@pytest.mark.parametrize("policy_set", [request_set, manifest_set], ids=["request", "manifests"])
def test_every_policy_expression_transpiles(policy_set):
    for pf in policy_set().files:
        spec = pf.doc["spec"]
        expressions = [x["expression"] for x in spec.get("matchConditions") or []]
        expressions += [x["expression"] for x in spec.get("variables") or []]
        expressions += [x["expression"] for x in spec["validations"]]
        expressions += [
            x["messageExpression"] for x in spec["validations"] if x.get("messageExpression")
        ]
        for expression in expressions:
            assert isinstance(p._program(expression), p._TranspiledRunner), (pf.name, expression)


def test_a_filter_whose_predicate_fails_fails_the_policy_as_in_the_interpreter(monkeypatch):
    """A NodePool requirement without its `key` makes the known-instance-types policy's
    `filter()` fail: the interpreter errors, and so must the transpiled code (it once dropped
    the failing element and allowed the pool)."""
    policy_set = manifest_set()
    pools = [m for m in composed("dev", (False, True, False), 0) if m.get("kind") == "NodePool"]
    assert pools
    broken = copy.deepcopy(pools[0])
    requirements = broken["spec"]["template"]["spec"]["requirements"]
    typed = [r for r in requirements if r.get("key") == "node.kubernetes.io/instance-type"]
    del typed[0]["key"]
    ours = {v[0]: v for v in verdicts(policy_set, [broken])}
    theirs = {v[0]: v for v in interpreted_verdicts(policy_set, [broken], monkeypatch)}
    name = "kiln-nodepool-known-instance-types"
    assert theirs[name][2:] == (False, p.ERROR)
    assert ours[name][2:] == (False, p.ERROR)
