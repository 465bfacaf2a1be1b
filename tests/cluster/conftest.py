"""Cluster fixtures: the simulated cluster without delays, the GitOps repository in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def cluster_settings(settings, tmp_path: Path):
    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    settings.KILN_GITOPS_REPO = str(tmp_path / "gitops.git")
    settings.VAR_DIR = tmp_path / "var"
    return settings
