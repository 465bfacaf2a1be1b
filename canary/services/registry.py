"""The service registry: the services rollouts shift traffic for, and their simulated traffic."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from audit import record
from canary.metrics import check_prometheus_url, validate_queries
from canary.models import MetricsSource, Service
from canary.ownership import require_namespace_of, require_service_host
from canary.services.validation import require_dns_labels
from canary.simulated_traffic import CLASSES, REGRESSIONS
from kiln.errors import Conflict, Forbidden, InvalidInput
from kiln.identity.models import Team
from kiln.identity.permissions import Actor, can_manage_rollout


def service_create(
    *,
    actor: Actor,
    team: Team,
    name: str,
    namespace: str,
    host: str = "",
    metrics_source: str = MetricsSource.SIMULATED,
    prometheus_url: str = "",
    queries: dict[str, str] | None = None,
    sim_traffic_class: str = "steady",
    backend: Any = None,
) -> Service:
    """Register a service for canary rollouts (engineers of its team, platform admins).

    Its namespace must belong to the team and its host must be a service of that
    namespace (canary.ownership; stored fully qualified); its query templates and
    metrics server are checked (canary.metrics). Any refusal changes nothing.
    """
    if not can_manage_rollout(actor, team.slug):
        raise Forbidden("only engineers of the owning team register its services")
    if metrics_source not in MetricsSource.values:
        raise InvalidInput(f"metrics_source must be one of {', '.join(MetricsSource.values)}")
    if sim_traffic_class not in CLASSES:
        raise InvalidInput(f"sim_traffic_class must be one of {', '.join(CLASSES)}")
    require_dns_labels(name=name, namespace=namespace)
    queries = validate_queries(queries)
    prometheus_url = check_prometheus_url(
        prometheus_url or "", required=metrics_source == MetricsSource.PROMETHEUS
    )
    fqdn = require_service_host(host or name, namespace)
    require_namespace_of(team.slug, namespace, backend)
    service = Service(
        team=team,
        name=name,
        namespace=namespace,
        host=fqdn,
        metrics_source=metrics_source,
        prometheus_url=prometheus_url,
        queries=queries,
        sim_traffic_class=sim_traffic_class,
    )
    # A duplicate is a Conflict (409), checked below; full_clean would make it a 400.
    service.full_clean(validate_unique=False, validate_constraints=False)
    with transaction.atomic():
        if Service.objects.filter(namespace=namespace, name=name).exists():
            raise Conflict(f"service {namespace}/{name} already exists")
        service.save()
        record(actor, "canary.service.created", service, _service_data(service))
    return service


def service_set_simulated_regression(
    *, actor: Actor, service: Service, version: str, regression: str | None
) -> Service:
    """Give (or take away) a simulated regression for one version of a demo service."""
    if not can_manage_rollout(actor, service.team.slug):
        raise Forbidden("only engineers of the owning team change its simulation")
    if regression is not None and regression not in REGRESSIONS:
        raise InvalidInput(f"regression must be one of {', '.join(REGRESSIONS)} or null")
    with transaction.atomic():
        service = Service.objects.select_for_update().get(pk=service.pk)
        regressions = dict(service.sim_regressions or {})
        if regression is None:
            regressions.pop(version, None)
        else:
            regressions[version] = regression
        service.sim_regressions = regressions
        service.save(update_fields=["sim_regressions"])
        record(
            actor,
            "canary.service.simulation_changed",
            service,
            {"version": version, "regression": regression},
        )
    return service


def _service_data(service: Service) -> dict[str, Any]:
    return {
        "team": service.team.slug,
        "name": service.name,
        "namespace": service.namespace,
        "host": service.host,
        "metrics_source": service.metrics_source,
    }
