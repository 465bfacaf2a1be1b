"""The KubeSchedulerConfigurations that wire the extender in (deploy/scheduler for a self-managed
control plane, the second-scheduler overlay's for managed clusters), checked against the documented
kubescheduler.config.k8s.io/v1 schema, and the extender's rendered manifests."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from django.conf import settings
from django.urls import resolve

from tests.deploy.manifests import render

DEPLOY = Path(settings.BASE_DIR) / "deploy"
CONFIGS = {
    "self-managed": DEPLOY / "scheduler" / "kube-scheduler-config.yaml",
    "second-scheduler": DEPLOY / "overlays" / "second-scheduler" / "kube-scheduler-config.yaml",
}

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


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def config(request) -> dict:
    return yaml.safe_load(CONFIGS[request.param].read_text())


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


def test_extender_urls_name_the_rendered_service_in_namespace_kiln(config):
    (extender,) = config["extenders"]
    url = urlparse(extender["urlPrefix"])
    objects = render("minimal")
    (service,) = [
        o
        for o in objects
        if o["kind"] == "Service" and o["metadata"]["name"] == "kiln-scheduler-extender"
    ]
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert url.port in {p["port"] for p in service["spec"]["ports"]}
    (deployment,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "kiln-scheduler-extender"
    ]
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert int(command[command.index("--port") + 1]) == url.port


def test_second_scheduler_has_its_own_name_lease_and_kube_scheduler_rights():
    config = yaml.safe_load(CONFIGS["second-scheduler"].read_text())
    assert [p["schedulerName"] for p in config["profiles"]] == ["kiln-scheduler"]
    assert config["leaderElection"]["resourceName"] == "kiln-scheduler"
    assert config["leaderElection"]["resourceNamespace"] == "kiln"
    objects = render("second-scheduler")
    (deployment,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "kiln-kube-scheduler"
    ]
    spec = deployment["spec"]["template"]["spec"]
    assert (
        spec.get("schedulerName", "default-scheduler") == "default-scheduler"
    )  # never schedules itself
    (configmap,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap"
        and o["metadata"]["name"].startswith("kiln-kube-scheduler-config")
    ]
    assert yaml.safe_load(configmap["data"]["kube-scheduler-config.yaml"]) == config
    assert {v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v} == {
        configmap["metadata"]["name"]
    }
    image = spec["containers"][0]["image"]
    assert image.startswith("registry.k8s.io/kube-scheduler:v1.")
    bound = {
        o["roleRef"]["name"]
        for o in objects
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and {"kind": "ServiceAccount", "name": spec["serviceAccountName"], "namespace": "kiln"}
        in o["subjects"]
    }
    assert {
        "system:kube-scheduler",
        "system:volume-scheduler",
        "kiln-kube-scheduler-lease",
    } <= bound
    (lease_role,) = [
        o
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["name"] == "kiln-kube-scheduler-lease"
    ]
    assert {"resources": ["leases"], "resourceNames": ["kiln-scheduler"], "verbs": ["get", "update"],
            "apiGroups": ["coordination.k8s.io"]} in lease_role["rules"]  # fmt: skip
