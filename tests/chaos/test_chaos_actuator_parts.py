"""The chaos actuators in three parts: manifests and fault merging are pure, the backend writes apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from canary.chaos import actuators, faults, manifests

ROOT = Path(__file__).resolve().parents[2]


def test_manifest_building_and_fault_merging_import_without_django():
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys\n"
        "import canary.chaos.faults, canary.chaos.manifests\n"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not loaded, loaded\n"
        "assert 'kiln.cluster' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("module", [manifests, faults, actuators], ids=lambda m: m.__name__)
def test_each_part_stays_under_400_lines(module):
    assert len(Path(module.__file__).read_text().splitlines()) < 400


def test_the_actuators_module_still_offers_every_name_its_callers_use():
    # Callers write `actuators.X`; the pure parts are re-exported, the same objects.
    assert actuators.FaultSpec is manifests.FaultSpec
    assert actuators.virtual_service_fault is manifests.virtual_service_fault
    assert actuators.fault_effect is faults.fault_effect
    assert actuators.FaultConflict is faults.FaultConflict
    missing = [name for name in actuators.__all__ if not hasattr(actuators, name)]
    assert missing == []


def test_the_standalone_fault_and_the_merged_fault_carry_the_same_fault_body():
    spec = manifests.FaultSpec(
        experiment_id="0f8e5f7a-1111-2222-3333-444455556666",
        namespace="shop",
        selector={"app": "checkout"},
        fault=manifests.HTTP_ABORT,
        service="checkout",
        abort_http_status=503,
        percent=40.0,
        max_percent=25.0,
    )
    standalone = manifests.virtual_service_fault(spec, 3)
    # The blast radius caps the asked 40% at 25%.
    body = {"abort": {"httpStatus": 503, "percentage": {"value": 25.0}}}
    assert standalone["spec"]["http"][0]["fault"] == body
    live = {
        "apiVersion": manifests.CHAOS_API_VS,
        "kind": "VirtualService",
        "metadata": {"name": "checkout", "namespace": "shop", "resourceVersion": "9"},
        "spec": {"hosts": ["checkout"], "http": [{"name": "primary", "route": []}]},
    }
    merged = faults.with_fault(live, spec, 3)
    assert merged["spec"]["http"][0]["fault"] == body
    assert merged["metadata"]["resourceVersion"] == "9"  # the precondition of the write
    assert [e["experiment"] for e in faults.fault_entries(merged)] == [spec.experiment_id]
