"""Fault manifests validate against the upstream CRDs in ../shared/crds; blast radius and fault effects."""

from __future__ import annotations

import functools
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.conf import settings

from canary.chaos import actuators
from canary.chaos.actuators import FaultSpec

CRDS = Path(settings.BASE_DIR).parent / "shared" / "crds"


@functools.cache
def _crd(crd_file: str) -> dict:
    return yaml.safe_load((CRDS / crd_file).read_text())


def _schema(crd_file: str, api_version: str, kind: str) -> dict:
    crd = _crd(crd_file)
    group, version = api_version.split("/")
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == kind
    served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
    assert version in served, f"{api_version} is not served by {crd_file}"
    return served[version]["schema"]["openAPIV3Schema"]


def _unknown_fields(obj, schema: dict, path: str = "") -> list[str]:
    """Fields a structural schema would prune (absent from `properties`, no additionalProperties)."""
    found: list[str] = []
    if isinstance(obj, dict) and "properties" in schema:
        for key, value in obj.items():
            if key in schema["properties"]:
                found += _unknown_fields(value, schema["properties"][key], f"{path}.{key}")
            elif not schema.get("additionalProperties") and not schema.get(
                "x-kubernetes-preserve-unknown-fields"
            ):
                found.append(f"{path}.{key}")
    elif isinstance(obj, list) and "items" in schema:
        for i, item in enumerate(obj):
            found += _unknown_fields(item, schema["items"], f"{path}[{i}]")
    return found


def _validate(manifest: dict, crd_file: str) -> None:
    schema = _schema(crd_file, manifest["apiVersion"], manifest["kind"])
    jsonschema.Draft7Validator(schema).validate(manifest)
    assert _unknown_fields(manifest["spec"], schema["properties"]["spec"]) == []


SPEC = dict(
    experiment_id="0f8e2a8c-1111-4222-8333-944445555666",
    namespace="shop",
    selector={"app": "web"},
    service="web",
    max_duration_seconds=900,
)


@pytest.mark.parametrize(
    "spec,fault_key,expected",
    [
        (
            FaultSpec(fault="http-delay", delay_ms=250, percent=40.0, **SPEC),
            "delay",
            {"fixedDelay": "250ms", "percentage": {"value": 40.0}},
        ),
        (
            FaultSpec(
                fault="http-abort", abort_http_status=503, percent=80.0, max_percent=30.0, **SPEC
            ),
            "abort",
            {"httpStatus": 503, "percentage": {"value": 30.0}},
        ),
    ],
    ids=["delay-40pct", "abort-capped-by-blast-radius"],
)
def test_virtual_service_fault_validates_against_the_istio_crd(spec, fault_key, expected):
    manifest = actuators.virtual_service_fault(spec, 3)
    _validate(manifest, "networking.istio.io/virtualservices.yaml")
    assert manifest["spec"]["http"][0]["fault"] == {fault_key: expected}
    assert manifest["metadata"]["name"] == "chaos-0f8e2a8c-3"
    assert manifest["metadata"]["labels"][actuators.LABEL_EXPERIMENT] == SPEC["experiment_id"]


def test_pod_chaos_validates_against_the_chaos_mesh_crd_with_the_hard_maximum_as_duration():
    manifest = actuators.pod_chaos(FaultSpec(fault="pod-kill", max_pods=2, **SPEC), 1, 2)
    _validate(manifest, "chaos-mesh.org/podchaos.yaml")
    assert manifest["spec"]["duration"] == "900s"
    assert manifest["spec"]["mode"] == "fixed" and manifest["spec"]["value"] == "2"
    assert manifest["spec"]["selector"] == {
        "namespaces": ["shop"],
        "labelSelectors": {"app": "web"},
    }


def test_a_typo_is_caught_by_the_crd_check():
    manifest = actuators.pod_chaos(FaultSpec(fault="pod-kill", max_pods=2, **SPEC), 1, 2)
    manifest["spec"]["mode"] = "some"
    with pytest.raises(jsonschema.ValidationError):
        _validate(manifest, "chaos-mesh.org/podchaos.yaml")
    manifest = actuators.pod_chaos(FaultSpec(fault="pod-kill", max_pods=2, **SPEC), 1, 2)
    manifest["spec"]["durration"] = "1s"
    with pytest.raises(AssertionError):
        _validate(manifest, "chaos-mesh.org/podchaos.yaml")


@pytest.mark.parametrize(
    "total,max_pods,max_percent,expected",
    [
        (10, 3, None, 3),  # the pod cap
        (10, None, 25.0, 2),  # floor(10 * 0.25) = 2
        (10, 5, 25.0, 2),  # the smaller of the two
        (2, 5, None, 2),  # never more pods than exist
        (3, None, 10.0, 0),  # floor(0.3) = 0: nothing rather than more than asked
        (0, 1, None, 0),
    ],
    ids=["pods", "percent", "both", "fewer-than-cap", "percent-rounds-down", "no-pods"],
)
def test_blast_radius(total, max_pods, max_percent, expected):
    assert actuators.blast_radius(total, max_pods, max_percent) == expected


def test_fault_effect_combines_aborts_and_delays_on_live_services_of_the_host():
    delay = actuators.virtual_service_fault(
        FaultSpec(fault="http-delay", delay_ms=200, percent=50.0, **SPEC), 1
    )
    abort = actuators.virtual_service_fault(
        FaultSpec(fault="http-abort", abort_http_status=500, percent=20.0, **SPEC), 2
    )
    gone = actuators.virtual_service_fault(
        FaultSpec(fault="http-abort", abort_http_status=500, percent=90.0, **SPEC), 3
    )
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    other = actuators.virtual_service_fault(
        FaultSpec(
            fault="http-abort", abort_http_status=500, percent=90.0, **{**SPEC, "service": "db"}
        ),
        4,
    )
    effect = actuators.fault_effect([delay, abort, gone, other], "web")
    # 20% aborted; 200 ms on half the requests = 100 ms mean.
    assert effect.error_rate == pytest.approx(0.2)
    assert effect.added_latency_ms == pytest.approx(100.0) and effect.delayed_share == 0.5
    assert actuators.fault_effect([], "web") == actuators.FaultEffect()
