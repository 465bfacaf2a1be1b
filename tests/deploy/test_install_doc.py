"""docs/install.md: its render commands run, and every name the other commands use exists."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
import yaml

from tests.deploy.manifests import DEPLOY, INSTALL_DOC, ROOT, kubectl, render

FENCE = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)


def _commands() -> list[str]:
    """Each shell command of the doc's ```sh blocks, continuation lines joined."""
    commands = []
    for block in FENCE.findall(INSTALL_DOC.read_text()):
        commands += [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]
    return commands


def _secret_keys() -> dict[str, set[str]]:
    docs = yaml.safe_load_all((DEPLOY / "base" / "secret.example.yaml").read_text())
    return {d["metadata"]["name"]: set(d["stringData"]) for d in docs if d}


RENDERS = [c for c in _commands() if c.startswith("kubectl kustomize ")]


def test_the_doc_has_commands_for_every_overlay():
    rendered = {shlex.split(c)[2] for c in RENDERS}
    assert rendered == {f"deploy/overlays/{o}" for o in ("minimal", "ha", "second-scheduler")}


@pytest.mark.parametrize("command", RENDERS)
def test_every_render_command_runs(command, tmp_path):
    words = shlex.split(command.split(">")[0])
    out = subprocess.run(  # noqa: S603 - the doc's own command, kubectl's path fixed
        [kubectl(), *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "kind: Deployment" in out.stdout


def test_apply_and_delete_name_overlays_that_render():
    for command in _commands():
        words = shlex.split(command)
        if words[:1] == ["kubectl"] and "-k" in words:
            path = words[words.index("-k") + 1]
            assert (ROOT / path / "kustomization.yaml").is_file(), command
            assert render(path.removeprefix("deploy/overlays/")), command


def test_secrets_created_are_the_contracts_with_its_keys():
    contract = _secret_keys()
    created = {}
    for command in _commands():
        words = shlex.split(command)
        if words[:1] != ["kubectl"] or "secret" not in words:
            continue
        kind = words[words.index("secret") + 1]
        name = words[words.index("secret") + 2]
        keys = {
            w.split("=", 2)[1] for w in words if w.startswith(("--from-literal=", "--from-file="))
        }
        if kind == "tls":
            keys = {"tls.crt", "tls.key"}
        created[name] = keys
    assert created == contract


def test_every_deploy_path_the_doc_names_exists():
    paths = set(re.findall(r"`(deploy/[\w./-]+)`", INSTALL_DOC.read_text()))
    paths |= set(re.findall(r"\b(deploy/[\w./-]+)", "\n".join(_commands())))
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert paths and missing == []


def test_the_label_selectors_the_doc_uses_match_rendered_objects():
    objects = render("minimal")
    for command in _commands():
        for selector in re.findall(r"-l (\S+)", command):
            key, value = selector.split("=")
            assert any(o["metadata"]["labels"].get(key) == value for o in objects), command
        for kind, name in re.findall(r"\b(deployment|service|job)/([\w-]+)", command):
            if "<" not in name and not name.endswith("-"):
                assert any(
                    o["kind"].lower() == kind and o["metadata"]["name"] == name for o in objects
                ), command
