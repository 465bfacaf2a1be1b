"""Istio manifests of a rollout: schema-valid against the upstream CRDs, weights read back."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml
from django.conf import settings

from canary.traffic import canary_weight_of, destination_rule, virtual_service

CRDS = Path(settings.BASE_DIR).parent / "shared" / "crds" / "networking.istio.io"
EXAMPLE = Path(settings.BASE_DIR) / "deploy" / "istio" / "canary-rollout-example.yaml"
HOST = "checkout.payments-prod.svc.cluster.local"


def _schema(kind_file: str) -> dict:
    crd = yaml.safe_load((CRDS / kind_file).read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"][
        "openAPIV3Schema"
    ]


@pytest.mark.parametrize("weight", [0, 5, 25, 50, 100])
def test_virtual_service_is_valid_and_splits_by_weight(weight):
    vs = virtual_service(
        name="checkout", namespace="payments-prod", host=HOST, canary_weight=weight
    )
    jsonschema.validate(vs, _schema("virtualservices.yaml"))
    weights = [r["weight"] for r in vs["spec"]["http"][0]["route"]]
    assert weights == [100 - weight, weight] and canary_weight_of(vs) == weight
    assert vs["spec"]["exportTo"] == ["."]  # its own namespace's proxies only


def test_destination_rule_is_valid_with_a_subset_per_version():
    dr = destination_rule(
        name="checkout",
        namespace="payments-prod",
        host=HOST,
        baseline_version="v1",
        canary_version="v2",
    )
    jsonschema.validate(dr, _schema("destinationrules.yaml"))
    assert {s["name"]: s["labels"]["version"] for s in dr["spec"]["subsets"]} == {
        "baseline": "v1",
        "canary": "v2",
    }


def test_a_schema_violation_is_caught():
    vs = virtual_service(name="checkout", namespace="payments-prod", host=HOST, canary_weight=5)
    vs["spec"]["http"][0]["route"][0]["weight"] = "most"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(vs, _schema("virtualservices.yaml"))
    with pytest.raises(ValueError):
        virtual_service(name="x", namespace="y", host=HOST, canary_weight=101)


def test_deploy_example_matches_what_kiln_applies():
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    expected = [
        destination_rule(
            name="checkout",
            namespace="payments-prod",
            host=HOST,
            baseline_version="v1",
            canary_version="v2",
        ),
        virtual_service(name="checkout", namespace="payments-prod", host=HOST, canary_weight=25),
    ]
    assert docs == expected
    jsonschema.validate(docs[0], _schema("destinationrules.yaml"))
    jsonschema.validate(docs[1], _schema("virtualservices.yaml"))
