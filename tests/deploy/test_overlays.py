"""deploy/overlays: each renders, validates strictly on Kubernetes 1.31 and 1.33, and agrees with
the base's contract (one namespace, labels, pinned images, names that resolve, probes)."""

from __future__ import annotations

import re

import pytest
from django.core.management import get_commands
from jsonschema import ValidationError

from tests.deploy.manifests import (
    K8S_VERSIONS,
    NAMESPACE,
    OVERLAYS,
    PROCESS_PORTS,
    containers,
    pod_specs,
    prerequisites,
    render,
    validate,
)

LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/part-of")
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "CustomResourceDefinition",
}
PINNED = re.compile(r"^[^@:]+(/[^@:]+)*(:[\w][\w.-]*)?(@sha256:[0-9a-f]{64})?$")


def _named(objects, kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _deployment(objects, component: str) -> dict:
    (found,) = [
        o for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]  # fmt: skip
    return found


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_strictly(overlay, version):
    errors = []
    for obj in render(overlay):
        try:
            validate(obj, version)
        except (ValidationError, LookupError, Exception) as exc:  # noqa: BLE001 - collect them all
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {str(exc).splitlines()[0]}")
    assert errors == []


def test_the_strict_validation_rejects_an_unknown_field():
    web = _deployment(render("minimal"), "web")
    bad = {**web, "spec": {**web["spec"], "replica": 2}}
    with pytest.raises(Exception, match="replica"):
        validate(bad, "1.33")


@pytest.mark.parametrize(
    ("kind", "misspell"),
    [
        ("PodMonitor", lambda spec: spec["podMetricsEndpoints"][0].update(intervall="30s")),
        ("PrometheusRule", lambda spec: spec["groups"][0]["rules"][0].update(expression="up")),
    ],
    ids=["podmonitor-endpoint", "prometheusrule-rule"],
)
def test_the_monitoring_objects_are_validated_strictly_too(kind, misspell):
    import copy

    obj = copy.deepcopy(next(o for o in render("ha") if o["kind"] == kind))
    validate(obj, "1.33")
    misspell(obj["spec"])
    with pytest.raises(Exception, match="intervall|expression"):
        validate(obj, "1.33")


def test_only_the_ha_overlay_carries_the_monitoring_objects():
    monitoring = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    assert {o["kind"] for o in render("ha")} >= {"PodMonitor", "PrometheusRule"}
    assert not monitoring & {o["kind"] for o in render("minimal")}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_namespace_and_the_labels_on_every_object(overlay):
    objects = render(overlay)
    version = _named(objects, "Namespace")[NAMESPACE]["metadata"]["labels"][
        "app.kubernetes.io/version"
    ]
    for obj in objects:
        meta = obj["metadata"]
        where = f"{obj['kind']}/{meta['name']}"
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, where
        else:
            assert (meta.get("namespace"), meta["name"]) in {(NAMESPACE, meta["name"])} or (
                ("Namespace", f"{meta.get('namespace')}") in prerequisites()
            ), where
        for label in LABELS:
            assert meta["labels"].get(label) == "kiln", (where, label)
        assert meta["labels"].get("app.kubernetes.io/version") == version, where
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"] == [NAMESPACE]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned_and_kilns_tag_is_the_version(overlay):
    objects = render(overlay)
    version = _named(objects, "Namespace")[NAMESPACE]["metadata"]["labels"][
        "app.kubernetes.io/version"
    ]
    kiln_images = set()
    for where, spec in pod_specs(objects):
        for container in containers(spec):
            image = container["image"]
            assert PINNED.match(image) and (":" in image.rsplit("/", 1)[-1] or "@" in image), (
                where,
                image,
            )
            assert not image.endswith(":latest"), (where, image)
            if image.rsplit("/", 1)[-1].startswith("kiln"):
                kiln_images.add(image)
    assert kiln_images == {f"registry.example.internal/kiln:{version}"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_name_an_object_uses_is_rendered_or_a_documented_prerequisite(overlay):
    objects = render(overlay)
    rendered = {(o["kind"], o["metadata"]["name"]) for o in objects}
    known = rendered | prerequisites()
    wanted: set[tuple[str, str, str]] = set()
    for where, spec in pod_specs(objects):
        wanted.add((where, "ServiceAccount", spec.get("serviceAccountName", "default")))
        if "priorityClassName" in spec:
            wanted.add((where, "PriorityClass", spec["priorityClassName"]))
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                wanted.add((where, "Secret", volume["secret"]["secretName"]))
            if "configMap" in volume:
                wanted.add((where, "ConfigMap", volume["configMap"]["name"]))
            if "persistentVolumeClaim" in volume:
                wanted.add(
                    (where, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
                )
        for container in containers(spec):
            for source in container.get("envFrom", []):
                if "secretRef" in source:
                    wanted.add((where, "Secret", source["secretRef"]["name"]))
                if "configMapRef" in source:
                    wanted.add((where, "ConfigMap", source["configMapRef"]["name"]))
    for ingress in _named(objects, "Ingress").values():
        for tls in ingress["spec"].get("tls", []):
            wanted.add((f"Ingress/{ingress['metadata']['name']}", "Secret", tls["secretName"]))
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                wanted.add(
                    (
                        f"Ingress/{ingress['metadata']['name']}",
                        "Service",
                        path["backend"]["service"]["name"],
                    )
                )
    for obj in objects:
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            where = f"{obj['kind']}/{obj['metadata']['name']}"
            ref = obj["roleRef"]
            wanted.add((where, ref["kind"], ref["name"]))
            for subject in obj.get("subjects", []):
                if subject["kind"] == "ServiceAccount":
                    assert subject["namespace"] == NAMESPACE, where
                    wanted.add((where, "ServiceAccount", subject["name"]))
    missing = sorted(w for w in wanted if (w[1], w[2]) not in known)
    assert missing == []


def test_the_cross_reference_check_sees_a_name_nobody_renders():
    assert ("Secret", "kiln-env") not in prerequisites()
    assert ("Secret", "kiln-secrets") in prerequisites()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_pdbs_and_policies_select_pods_that_exist(overlay):
    objects = render(overlay)
    pods = [
        (o["spec"]["template"]["metadata"]["labels"], o["spec"]["template"]["spec"])
        for o in objects if o["kind"] in ("Deployment",)
    ]  # fmt: skip
    for obj in objects:
        if obj["kind"] == "Service":
            selector = obj["spec"]["selector"]
            matched = [spec for labels, spec in pods if selector.items() <= labels.items()]
            assert matched, obj["metadata"]["name"]
            names = {p["name"] for c in matched[0]["containers"] for p in c.get("ports", [])}
            assert {p["targetPort"] for p in obj["spec"]["ports"]} <= names
        if obj["kind"] == "PodDisruptionBudget":
            selector = obj["spec"]["selector"]["matchLabels"]
            assert any(selector.items() <= labels.items() for labels, _ in pods), obj["metadata"][
                "name"
            ]
        if obj["kind"] == "NetworkPolicy":
            for expr in obj["spec"]["podSelector"].get("matchExpressions", []):
                components = {labels.get(expr["key"]) for labels, _ in pods} | {
                    "migrate",
                    "audit-verify",
                }
                assert set(expr["values"]) <= components, obj["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_process_serves_probes_and_metrics_on_its_contract_port(overlay):
    objects = render(overlay)
    for component, (port_name, port) in PROCESS_PORTS.items():
        deployment = _deployment(objects, component)
        spec = deployment["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == f"kiln-{component}"
        (container,) = spec["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports[port_name] == port, component
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if component != "web":
            assert env["KILN_METRICS_PORT"] == str(port), component
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port_name}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port_name}
    for obj in objects:
        if obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["containers"]:
                assert "livenessProbe" in container and "readinessProbe" in container, obj[
                    "metadata"
                ]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_are_hardened_and_run_commands_kiln_has(overlay):
    commands = get_commands()
    for where, spec in pod_specs(render(overlay)):
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        for container in containers(spec):
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False, where
            assert ctx["readOnlyRootFilesystem"] is True, where
            assert ctx["capabilities"]["drop"] == ["ALL"], where
            assert "memory" in container["resources"]["limits"], where
            assert container["resources"]["requests"]["cpu"], where
            words = (
                " ".join(container.get("command", [])).replace("&&", " ").replace(";", " ").split()
            )
            for i, word in enumerate(words[:-1]):
                if word == "manage.py":
                    assert words[i + 1] in commands, f"{where} runs unknown command {words[i + 1]}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_singletons_never_run_twice_during_a_rollout(overlay):
    objects = render(overlay)
    for component in ("beat", "audit-writer", "chaos-reaper"):
        deployment = _deployment(objects, component)
        assert deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["strategy"]["type"] == "Recreate"


def test_minimal_runs_one_of_each_and_ha_spreads_and_protects_the_extender_and_web():
    minimal = render("minimal")
    assert {d["spec"]["replicas"] for d in minimal if d["kind"] == "Deployment"} == {1}
    assert not [o for o in minimal if o["kind"] in ("PodDisruptionBudget", "PriorityClass")]
    ha = render("ha")
    pdbs = {p["metadata"]["name"] for p in ha if p["kind"] == "PodDisruptionBudget"}
    assert {"kiln-web", "kiln-scheduler-extender"} <= pdbs
    classes = _named(ha, "PriorityClass")
    for component in ("web", "scheduler-extender"):
        deployment = _deployment(ha, component)
        spec = deployment["spec"]["template"]["spec"]
        assert deployment["spec"]["replicas"] >= 3
        assert spec["priorityClassName"] in classes
        keys = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
        assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    assert classes["kiln-scheduler-extender"]["value"] > classes["kiln-web"]["value"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_extender_is_one_deployment_with_mtls_on_the_port_kube_scheduler_calls(overlay):
    objects = render(overlay)
    extenders = [
        o for o in objects if o["kind"] == "Deployment" and "extender" in o["metadata"]["name"]
    ]
    assert [e["metadata"]["name"] for e in extenders] == ["kiln-scheduler-extender"]
    (container,) = extenders[0]["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:3] == ["python", "manage.py", "scheduler_extender"]
    assert command[command.index("--port") + 1] == "8888"
    assert {"--tls-cert", "--tls-key", "--client-ca"} <= set(command)
    service = _named(objects, "Service")["kiln-scheduler-extender"]
    assert [p["port"] for p in service["spec"]["ports"]] == [8888]
    policy = _named(objects, "NetworkPolicy")["kiln-ingress-kube-scheduler"]["spec"]
    (rule,) = policy["ingress"]
    assert list(rule["from"][0]) == ["ipBlock"] and rule["ports"] == [
        {"protocol": "TCP", "port": 8888}
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_default_denies_and_admits_prometheus_to_every_metrics_port(overlay):
    policies = _named(render(overlay), "NetworkPolicy")
    deny = policies["kiln-default-deny"]["spec"]
    assert deny["podSelector"] == {} and set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny and "egress" not in deny
    scrape = {p["port"] for p in policies["kiln-ingress-prometheus"]["spec"]["ingress"][0]["ports"]}
    assert scrape == {port for _, port in PROCESS_PORTS.values()}
    for name in ("kiln-egress-postgresql", "kiln-egress-redis", "kiln-egress-kube-api"):
        (rule,) = policies[name]["spec"]["egress"]
        assert "ipBlock" in rule["to"][0], name
