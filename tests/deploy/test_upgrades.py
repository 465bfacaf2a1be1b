"""Upgrades: the migration Job is a hook that can run again, and no process serves on a schema
its code does not know (it waits in an init container for `migrate --check`)."""

from __future__ import annotations

import shutil

import pytest
import yaml
from django.core.management import call_command

from tests.deploy.manifests import DEPLOY, OVERLAYS, render, render_dir


def _jobs(objects) -> list[dict]:
    return [o for o in objects if o["kind"] == "Job"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_migration_job_is_a_rerunnable_hook_named_after_the_release(overlay):
    objects = render(overlay)
    (job,) = _jobs(objects)
    version = job["metadata"]["labels"]["app.kubernetes.io/version"]
    assert job["metadata"]["name"] == f"kiln-migrate-{version}"
    annotations = job["metadata"]["annotations"]
    assert annotations["argocd.argoproj.io/hook"] == "PreSync"
    assert annotations["argocd.argoproj.io/hook-delete-policy"] == "BeforeHookCreation"
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "manage.py migrate --noinput" in " ".join(container["command"])


def test_a_new_release_renders_a_new_migration_job(tmp_path):
    # The second `kubectl apply -k` with a new image must not meet the old Job's immutable
    # template: bump the release in a copy of deploy/ and the Job's name follows.
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    base = copy / "base" / "kustomization.yaml"
    kustomization = yaml.safe_load(base.read_text())
    kustomization["images"][0]["newTag"] = "0.2.0"
    kustomization["labels"][0]["pairs"]["app.kubernetes.io/version"] = "0.2.0"
    base.write_text(yaml.safe_dump(kustomization))
    (before,) = _jobs(render("minimal"))
    (after,) = _jobs(render_dir(copy / "overlays" / "minimal"))
    assert after["metadata"]["name"] == "kiln-migrate-0.2.0" != before["metadata"]["name"]
    assert after["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":0.2.0")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_kiln_process_waits_for_its_schema_before_it_starts(overlay):
    for obj in render(overlay):
        if (
            obj["kind"] != "Deployment"
            or obj["metadata"]["labels"]["app.kubernetes.io/component"] == "kube-scheduler"
        ):
            continue
        spec = obj["spec"]["template"]["spec"]
        (init,) = spec["initContainers"]
        assert init["image"] == spec["containers"][0]["image"], obj["metadata"]["name"]
        assert "until python manage.py migrate --check" in " ".join(init["command"])


@pytest.mark.django_db
def test_migrate_check_passes_on_a_current_schema():
    # The init containers' command: on a fully migrated database it returns (no SystemExit).
    call_command("migrate", "--check", verbosity=0)
