"""deploy/monitoring: the PrometheusRule's alerts pass `promtool check rules` and their unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from kiln.observability import KINDS

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
TESTS = MONITORING / "tests" / "prometheus-rules.test.yaml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"  # missing: fails (make prometheus-tools)
REQUIRED = {
    "KilnAuditChainStalled",
    "KilnSchedulerExtenderErrors",
    "KilnSchedulerExtenderSlow",
    "KilnChaosFaultPastLease",
    "KilnEnvironmentQuarantined",
    "KilnSpotReclaimedLatencySensitivePods",
    "KilnSchedulerExtenderCertificateExpiring",
}


def _rule() -> dict:
    return yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())


def _promtool(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PROMTOOL, *args], cwd=directory, capture_output=True, text=True, timeout=120
    )


def _extract(tmp_path: Path) -> Path:
    """spec.groups as a plain rules file beside a copy of the unit tests."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _rule()["spec"]["groups"]}))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    return tmp_path


def test_the_rules_pass_promtool_check_rules(tmp_path):
    result = _promtool(_extract(tmp_path), "check", "rules", "rules.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_passes_its_promtool_unit_tests(tmp_path):
    result = _promtool(_extract(tmp_path), "test", "rules", TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_required_and_has_a_test_that_fires_it_and_one_that_does_not():
    alerts = {r["alert"] for g in _rule()["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert REQUIRED <= alerts
    cases = [c for t in yaml.safe_load(TESTS.read_text())["tests"] for c in t["alert_rule_test"]]
    fired = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert alerts <= fired, alerts - fired
    assert REQUIRED - {"KilnEnvironmentQuarantined"} <= quiet, REQUIRED - quiet


def test_a_broken_expectation_fails_the_unit_tests(tmp_path):
    """The unit tests can fail: an alert expected where none fires is reported."""
    directory = _extract(tmp_path)
    text = (directory / TESTS.name).read_text().replace("exp_alerts: []", "exp_alerts: [{}]", 1)
    (directory / TESTS.name).write_text(text)
    assert _promtool(directory, "test", "rules", TESTS.name).returncode != 0


def test_monitors_cover_every_metrics_port_and_the_prometheus_rule_is_listed():
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert set(kustomization["resources"]) == {"podmonitors.yaml", "prometheus-rules.yaml"}
    monitors = list(yaml.safe_load_all((MONITORING / "podmonitors.yaml").read_text()))
    covered: set[str] = set()
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["kind"] == "PodMonitor"
        selector = monitor["spec"]["selector"]
        components = set(
            [selector.get("matchLabels", {}).get("app.kubernetes.io/component")]
            if "app.kubernetes.io/component" in selector.get("matchLabels", {})
            else next(e["values"] for e in selector["matchExpressions"])
        )
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["path"] == "/metrics"
        assert endpoint["port"] == ("http" if components == {"web"} else "metrics")
        covered |= components
    assert covered == set(KINDS)
