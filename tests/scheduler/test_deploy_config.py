"""deploy/scheduler: the KubeSchedulerConfiguration that wires the extender in, checked against the
documented kubescheduler.config.k8s.io/v1 schema, and the extender's own manifests."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from django.conf import settings
from django.urls import resolve

DEPLOY = Path(settings.BASE_DIR) / "deploy" / "scheduler"

# Field names and types of kubescheduler.config.k8s.io/v1 (k8s.io/kube-scheduler/config/v1/types.go).
PLUGIN = {"name": str, "weight": int}
PLUGIN_SET = {"enabled": [PLUGIN], "disabled": [PLUGIN]}
PLUGINS = {
    point: PLUGIN_SET
    for point in (
        "preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
        "reserve", "permit", "preBind", "bind", "postBind", "multiPoint",
    )
}  # fmt: skip
PROFILE = {
    "schedulerName": str,
    "percentageOfNodesToScore": int,
    "plugins": PLUGINS,
    "pluginConfig": [dict],
}
TLS = {
    "insecure": bool, "serverName": str, "certFile": str, "keyFile": str, "caFile": str,
    "certData": str, "keyData": str, "caData": str,
}  # fmt: skip
EXTENDER = {
    "urlPrefix": str, "filterVerb": str, "preemptVerb": str, "prioritizeVerb": str, "weight": int,
    "bindVerb": str, "enableHTTPS": bool, "tlsConfig": TLS, "httpTimeout": str,
    "nodeCacheCapable": bool, "managedResources": [{"name": str, "ignoredByScheduler": bool}],
    "ignorable": bool,
}  # fmt: skip
CONFIG = {
    "apiVersion": str, "kind": str, "parallelism": int, "leaderElection": dict, "clientConnection": dict,
    "healthzBindAddress": str, "metricsBindAddress": str, "enableProfiling": bool,
    "enableContentionProfiling": bool, "percentageOfNodesToScore": int, "podInitialBackoffSeconds": int,
    "podMaxBackoffSeconds": int, "profiles": [PROFILE], "extenders": [EXTENDER], "delayCacheUntilActive": bool,
}  # fmt: skip
DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def check(value, schema, path: str = "$") -> list[str]:
    """Unknown fields and wrong types under `path` (kube-scheduler's strict decoding rejects both)."""
    if isinstance(schema, dict) and schema and all(isinstance(k, str) for k in schema):
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        errors = [f"{path}.{k}: unknown field" for k in value if k not in schema]
        for key, sub in value.items():
            if key in schema:
                errors += check(sub, schema[key], f"{path}.{key}")
        return errors
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [e for i, item in enumerate(value) for e in check(item, schema[0], f"{path}[{i}]")]
    if schema is int and isinstance(value, bool):
        return [f"{path}: expected an integer"]
    return [] if isinstance(value, schema) else [f"{path}: expected {schema.__name__}"]


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())


def test_config_matches_the_v1_schema(config):
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert check(config, CONFIG) == []


def test_schema_check_catches_mistakes():
    bad = {"extenders": [{"urlPrefix": "x", "ignoreable": False, "weight": "5"}]}
    assert check(bad, CONFIG) == [
        "$.extenders[0].ignoreable: unknown field",
        "$.extenders[0].weight: expected int",
    ]


def test_extender_is_wired_fail_closed_with_both_verbs(config):
    (extender,) = config["extenders"]
    assert extender["ignorable"] is False
    assert extender["filterVerb"] == "filter"
    assert extender["prioritizeVerb"] == "prioritize"
    assert extender["nodeCacheCapable"] is True
    # v1 validation: a prioritizing extender needs a positive weight; httpTimeout is a duration.
    assert extender["weight"] > 0
    assert DURATION.match(extender["httpTimeout"])
    assert "bindVerb" not in extender and "preemptVerb" not in extender
    # managedResources: none (Kiln does not own an extended resource).
    assert extender.get("managedResources", []) == []


def test_extender_urls_resolve_to_kilns_endpoints(config):
    (extender,) = config["extenders"]
    prefix = urlparse(extender["urlPrefix"]).path.rstrip("/")
    assert resolve(f"{prefix}/{extender['filterVerb']}").url_name == "extender-filter"
    assert resolve(f"{prefix}/{extender['prioritizeVerb']}").url_name == "extender-prioritize"
    assert urlparse(extender["urlPrefix"]).scheme == (
        "https" if extender["enableHTTPS"] else "http"
    )


def test_profile_turns_off_the_spreading_scorers_but_keeps_fit_filtering(config):
    (profile,) = config["profiles"]
    disabled = {p["name"] for p in profile["plugins"]["score"]["disabled"]}
    assert disabled == {"NodeResourcesFit", "NodeResourcesBalancedAllocation"}
    assert "filter" not in profile["plugins"]


def test_extender_manifests(config):
    docs = list(yaml.safe_load_all((DEPLOY / "extender.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert {
        "Deployment",
        "Service",
        "NetworkPolicy",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    } <= set(kinds)
    container = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:3] == ["python", "manage.py", "scheduler_extender"]
    port = int(container["command"][container["command"].index("--port") + 1])
    assert urlparse(config["extenders"][0]["urlPrefix"]).port == port
    assert kinds["Service"]["spec"]["ports"][0]["port"] == port
    policy = kinds["NetworkPolicy"]["spec"]
    assert policy["policyTypes"] == ["Ingress"] and policy["ingress"][0]["ports"][0]["port"] == port
    rules = kinds["ClusterRole"]["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]}
    ]
