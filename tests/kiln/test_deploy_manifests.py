"""deploy/kiln: every process Kiln runs in production is a real command, hardened and probed."""

from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import get_commands

DEPLOY = Path(settings.BASE_DIR) / "deploy" / "kiln"


def _documents() -> list[dict]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    docs: list[dict] = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
    return docs


def _pod_specs() -> list[tuple[str, dict]]:
    specs = []
    for doc in _documents():
        if doc["kind"] in ("Deployment", "Job"):
            specs.append((doc["metadata"]["name"], doc["spec"]["template"]["spec"]))
    return specs


def test_kustomization_lists_only_files_that_exist():
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    missing = [n for n in kustomization["resources"] if not (DEPLOY / n).is_file()]
    assert missing == []
    assert kustomization["namespace"] == "kiln"


def test_each_process_type_has_one_deployment():
    names = {d["metadata"]["name"] for d in _documents() if d["kind"] == "Deployment"}
    assert names == {
        "kiln-web",
        "kiln-worker",
        "kiln-beat",
        "kiln-audit-writer",
        "kiln-scheduler-extender",
        "kiln-chaos-reaper",
    }


@pytest.mark.parametrize("name,spec", _pod_specs(), ids=[n for n, _ in _pod_specs()])
def test_every_manage_py_command_the_manifests_run_exists(name, spec):
    commands = get_commands()
    for container in spec["containers"]:
        words = " ".join(container["command"]).replace("&&", " ").split()
        for i, word in enumerate(words[:-1]):
            if word == "manage.py":
                assert words[i + 1] in commands, f"{name} runs unknown command {words[i + 1]}"


@pytest.mark.parametrize("name,spec", _pod_specs(), ids=[n for n, _ in _pod_specs()])
def test_pods_are_hardened(name, spec):
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for container in spec["containers"]:
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert "memory" in container["resources"]["limits"]
        assert container["resources"]["requests"]["cpu"]


def test_singletons_never_run_twice_during_a_rollout():
    # beat, the audit writer and the chaos reaper must not overlap: Recreate, one replica.
    for doc in _documents():
        if doc["metadata"]["name"] in ("kiln-beat", "kiln-audit-writer", "kiln-chaos-reaper"):
            assert doc["spec"]["replicas"] == 1
            assert doc["spec"]["strategy"]["type"] == "Recreate"


def test_web_is_probed_on_the_health_endpoints_kiln_serves(client):
    web = next(
        d for d in _documents() if d["kind"] == "Deployment" and d["metadata"]["name"] == "kiln-web"
    )
    container = web["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert client.get("/healthz").status_code == 200
