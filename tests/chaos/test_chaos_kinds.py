# ruff: noqa: F811 - fixtures are imported from test_chaos_support and requested by name
"""The Chaos Mesh fault kinds: objects valid against the upstream CRDs, bounds as data, and bad
input refused with the field and the rule named, nothing started."""

from __future__ import annotations

import functools
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.conf import settings

from audit.models import OutboxEvent
from canary.chaos import actuators, chaos_mesh, kinds
from canary.chaos.actuators import FaultSpec
from canary.chaos.models import ChaosExperiment
from tests.chaos.test_chaos_actuators import _unknown_fields
from tests.chaos.test_chaos_support import (  # noqa: F401
    admin,
    backend,
    chaos_settings,
    engineer,
    shop,
)

SHARED = Path(settings.BASE_DIR).parent / "shared" / "crds"
VENDORED = Path(__file__).parent / "crds"  # the kinds ../shared lacks (crds/SOURCE.md)


@functools.cache
def _crd(plural: str) -> dict:
    for root in (SHARED, VENDORED):
        path = root / "chaos-mesh.org" / f"{plural}.yaml"
        if path.exists():
            return yaml.safe_load(path.read_text())
    raise AssertionError(f"no CRD for {plural}")


def validate(manifest: dict) -> None:
    """Schema-valid, and no field a structural schema would prune."""
    plural = next(k.plural for k in kinds.KINDS.values() if k.object_kind == manifest["kind"])
    crd = _crd(plural)
    group, version = manifest["apiVersion"].split("/")
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == manifest["kind"]
    served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
    schema = served[version]["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator(schema).validate(manifest)
    assert _unknown_fields(manifest["spec"], schema["properties"]["spec"]) == []


EXAMPLES = {
    "network-delay": {"latency_ms": 200, "jitter_ms": 20},
    "network-loss": {"loss_percent": 30.0},
    "network-partition": {"target_selector": {"app": "db"}, "direction": "both"},
    "cpu-stress": {"cpu_workers": 2, "cpu_load": 80},
    "memory-stress": {"memory_mb": 256, "memory_workers": 1},
    "dns-error": {"dns_patterns": ["payments.example.com", "*.internal"]},
    "clock-skew": {"time_offset_seconds": -120},
}


def data_for(fault: str, **over) -> dict:
    """A valid experiment of `fault` on shop's web pods."""
    data = {
        "name": f"{fault} on web",
        "namespace": "shop",
        "selector": {"app": "web"},
        "fault": fault,
        "duration_seconds": 60,
        "max_duration_seconds": 300,
        "max_pods": 2,
        "max_percent": 25.0,
        "stop_conditions": [],
        **EXAMPLES[fault],
    }
    data.update(over)
    return data


@pytest.mark.parametrize("fault", sorted(kinds.KINDS), ids=sorted(kinds.KINDS))
def test_every_kind_builds_an_object_its_crd_accepts_with_the_hard_maximum_as_duration(fault):
    params = kinds.kind_params(data_for(fault))
    spec = FaultSpec(
        experiment_id="0f8e2a8c-1111-4222-8333-944445555666",
        namespace="shop",
        selector={"app": "web"},
        fault=fault,
        max_duration_seconds=300,
        params=params,
    )
    manifest = chaos_mesh.chaos_object(
        fault=fault,
        name=actuators.object_name(spec, 4),
        namespace="shop",
        labels=actuators.labels_for(spec, 4),
        params=params,
        pods=["web-1", "web-0"],
        max_duration_seconds=300,
    )
    validate(manifest)
    assert manifest["kind"] == kinds.KINDS[fault].object_kind
    assert manifest["spec"]["duration"] == "300s"
    # Exactly the pods counted, by name: Chaos Mesh selects nothing else.
    assert manifest["spec"]["selector"] == {"pods": {"shop": ["web-0", "web-1"]}}
    assert manifest["spec"]["mode"] == "all"


def test_the_magnitude_lands_where_chaos_mesh_reads_it():
    def spec_of(fault: str) -> dict:
        return chaos_mesh.chaos_object(
            fault=fault,
            name="x",
            namespace="shop",
            labels={},
            params=kinds.kind_params(data_for(fault)),
            pods=["web-0"],
            max_duration_seconds=60,
        )["spec"]

    assert spec_of("network-delay")["delay"] == {"latency": "200ms", "jitter": "20ms"}
    assert spec_of("network-loss")["loss"] == {"loss": "30"}
    partition = spec_of("network-partition")
    assert partition["action"] == "partition" and partition["direction"] == "both"
    assert partition["target"]["selector"] == {
        "namespaces": ["shop"],
        "labelSelectors": {"app": "db"},
    }
    assert spec_of("cpu-stress")["stressors"] == {"cpu": {"workers": 2, "load": 80}}
    assert spec_of("memory-stress")["stressors"] == {"memory": {"workers": 1, "size": "256MB"}}
    assert spec_of("dns-error")["patterns"] == ["payments.example.com", "*.internal"]
    assert spec_of("clock-skew")["timeOffset"] == "-120s"


def test_a_duration_past_the_kinds_own_maximum_is_capped_on_the_object():
    manifest = chaos_mesh.chaos_object(
        fault="clock-skew",
        name="x",
        namespace="shop",
        labels={},
        params={"time_offset_seconds": 30},
        pods=["web-0"],
        max_duration_seconds=86_400,
    )
    assert manifest["spec"]["duration"] == "600s"


@pytest.mark.parametrize(
    "total,max_pods,max_percent,fault,expected",
    [
        (10, None, 100.0, "network-loss", 5),  # the kind's 50% cap wins over 100% asked
        (10, 8, None, "network-delay", 5),  # max_pods alone is capped too: floor(10 * 0.5)
        (10, 2, 40.0, "cpu-stress", 2),  # the smallest of 2, floor(4), floor(5)
        (8, None, None, "clock-skew", 2),  # 25% of 8
        (3, 3, None, "clock-skew", 0),  # floor(0.75) = 0: none rather than more than allowed
        (4, None, 50.0, "dns-error", 2),  # 50% of 4 is exactly 2 (no float shortfall)
    ],
    ids=["loss-cap", "pods-capped", "smallest", "skew-25pct", "rounds-down", "exact-half"],
)
def test_pods_within_the_blast_radius(total, max_pods, max_percent, fault, expected):
    assert kinds.pods_within(total, max_pods, max_percent, fault) == expected


@pytest.mark.parametrize(
    "fault,over,field,words",
    [
        ("clock-skew", {"time_offset_seconds": 7200}, "time_offset_seconds", "-600 to 600s"),
        ("clock-skew", {"time_offset_seconds": 0}, "time_offset_seconds", "no fault"),
        ("network-loss", {"loss_percent": 100.0, "max_percent": 100.0}, "max_percent", "50%"),
        ("network-loss", {"loss_percent": 0.5}, "loss_percent", "1 to 100%"),
        (
            "network-delay",
            {"latency_ms": 100, "jitter_ms": 150},
            "jitter_ms",
            "at most the latency",
        ),
        ("network-delay", {"latency_ms": 60_000}, "latency_ms", "1 to 5000ms"),
        (
            "network-partition",
            {"target_namespace": "lab"},
            "target_namespace",
            "within the experiment's own namespace",
        ),
        ("network-partition", {"target_selector": {}}, "target_selector", "required"),
        ("cpu-stress", {"cpu_workers": 64}, "cpu_workers", "1 to 8"),
        ("memory-stress", {"memory_mb": 65_536}, "memory_mb", "1 to 4096MB"),
        ("dns-error", {"dns_patterns": ["*"]}, "dns_patterns", "every lookup"),
        ("dns-error", {"dns_patterns": []}, "dns_patterns", "required"),
        ("clock-skew", {"max_duration_seconds": 3600}, "max_duration_seconds", "at most 600"),
        ("cpu-stress", {"loss_percent": 10.0}, "loss_percent", "not a field of cpu-stress"),
    ],
    ids=[
        "two-hour-skew",
        "zero-skew",
        "total-loss-on-every-pod",
        "loss-below-1pct",
        "jitter-over-latency",
        "minute-latency",
        "partition-beyond-namespace",
        "partition-without-other-side",
        "too-many-cpu-workers",
        "64-gb",
        "every-name",
        "no-names",
        "skew-past-its-maximum",
        "field-of-another-kind",
    ],
)
def test_kind_rules_name_the_field_and_the_rule(fault, over, field, words):
    errors = kinds.kind_errors(data_for(fault, **over))
    assert field in errors, errors
    assert words in errors[field]


@pytest.mark.parametrize("fault", sorted(kinds.KINDS), ids=sorted(kinds.KINDS))
def test_the_examples_break_no_rule(fault):
    assert kinds.kind_errors(data_for(fault)) == {}


def test_http_faults_refuse_the_chaos_mesh_fields():
    errors = kinds.kind_errors({"fault": "http-delay", "delay_ms": 5, "latency_ms": 5})
    assert errors == {"latency_ms": "not a field of http-delay"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "over,field",
    [
        ({"fault": "clock-skew", "time_offset_seconds": 7200}, "time_offset_seconds"),
        (
            {"fault": "network-loss", "loss_percent": 100.0, "max_percent": 100.0},
            "max_percent",
        ),
    ],
    ids=["two-hour-skew", "total-loss-beyond-blast-radius"],
)
def test_the_api_refuses_out_of_range_magnitudes_and_starts_nothing(
    api_client_for, shop, over, field
):
    body = data_for(**over)
    client = api_client_for("engineer", sub="alice", team="payments")
    response = client.post("/api/v1/chaos/experiments/", body, format="json")
    assert response.status_code == 400, response.content
    fields = response.json()["extra"]["fields"]
    assert field in fields, fields
    assert not ChaosExperiment.objects.exists()
    assert not OutboxEvent.objects.filter(action__startswith="chaos.").exists()


@pytest.mark.django_db
def test_the_api_creates_every_kind_with_its_magnitude(api_client_for, shop):
    api = api_client_for("engineer", sub="alice", team="payments")
    for fault in sorted(kinds.KINDS):
        # One selector each: experiments on one target would overlap.
        namespace_free = data_for(fault, name=f"k {fault}", selector={"app": "web", "k": fault})
        response = api.post(
            "/api/v1/chaos/experiments/", {**namespace_free, "start": False}, format="json"
        )
        assert response.status_code == 201, (fault, response.content)
        body = response.json()
        assert body["fault"] == fault
        assert body["params"] == kinds.kind_params(data_for(fault))


@pytest.mark.django_db
def test_the_form_offers_the_kinds_and_names_the_field_it_refuses(client, shop, django_user_model):
    from django.contrib.auth.models import Group

    from kiln.identity.models import Membership, Team

    user = django_user_model.objects.create_user("alice", password="pw-long-enough-1")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    Membership.objects.create(user=user, team=Team.objects.get(slug="payments"))
    client.force_login(user)
    page = client.get("/chaos/new/")
    assert page.status_code == 200
    html = page.content.decode()
    for fault in kinds.KINDS:
        assert f'value="{fault}"' in html
    assert 'data-kinds="clock-skew"' in html and 'name="time_offset_seconds"' in html
    # The idempotency key travels hidden, without a label beside nothing.
    assert 'type="hidden" name="idempotency_key"' in html and "Idempotency key" not in html
    form = {
        "name": "skew",
        "namespace": "shop",
        "selector": "app=web",
        "fault": "clock-skew",
        "time_offset_seconds": "7200",
        "percent": "100",
        "duration_seconds": "60",
        "max_duration_seconds": "300",
        "max_pods": "1",
    }
    refused = client.post("/chaos/new/", form)
    assert refused.status_code == 400
    errors = refused.context["form"].errors
    assert "-600 to 600s" in errors["time_offset_seconds"][0]
    assert not ChaosExperiment.objects.exists()
    created = client.post("/chaos/new/", {**form, "time_offset_seconds": "-90"})
    assert created.status_code == 302, created.context["form"].errors
    exp = ChaosExperiment.objects.get()
    assert exp.fault == "clock-skew" and exp.params == {"time_offset_seconds": -90}
    partition = client.post(
        "/chaos/new/",
        {
            **form,
            "name": "split",
            "selector": "app=api",
            "fault": "network-partition",
            "time_offset_seconds": "",
            "target_selector": "app=db",
        },
    )
    assert partition.status_code == 302, partition.context["form"].errors
    assert ChaosExperiment.objects.get(name="split").params == {
        "target_selector": {"app": "db"},
        "target_namespace": "shop",
        "direction": "both",
    }


def test_the_docs_table_is_the_kinds_data():
    """docs/chaos.md's fault-kind table says what kinds.py enforces, kind by kind."""
    text = (Path(settings.BASE_DIR) / "docs" / "chaos.md").read_text()
    for kind in kinds.KINDS.values():
        row = (
            f"| `{kind.fault}` | {kind.object_kind} | {kind.blast_rule} | "
            f"{kind.magnitude_rule} | {kind.max_duration_seconds} s |"
        )
        assert row in text, row


@pytest.mark.parametrize(
    "fault,words",
    [
        ("network-delay", "200 ms added to every packet sent (± 20 ms)"),
        ("network-loss", "30% of packets sent dropped"),
        ("network-partition", "cut off from app=db (both)"),
        ("cpu-stress", "2 CPU workers at 80% load"),
        ("memory-stress", "1 worker holding 256 MB"),
        ("dns-error", "lookups of payments.example.com, *.internal fail"),
        ("clock-skew", "clock behind by 120 s"),
    ],
    ids=lambda v: v if v in kinds.KINDS else "",
)
def test_the_magnitude_in_words(fault, words):
    assert chaos_mesh.describe(fault, kinds.kind_params(data_for(fault))) == words
