"""Demo data: two simulated services, one healthy canary that will be promoted, one that rolls back.

`make dev` adds a third (`seed_prometheus_demo`): a service whose metrics come from a real
Prometheus scraping the development traffic source (canary_dev_prometheus, canary_dev_traffic).
"""

from __future__ import annotations

from canary import services
from canary.models import MetricsSource, Service
from canary.ownership import TEAM_LABEL, namespace_owner
from kiln.cluster.backends import get_backend
from kiln.identity.models import Team
from kiln.identity.permissions import system_actor

DEMO = (
    # team, service, namespace, traffic class, canary regression (None: healthy), traffic seed
    ("payments", "checkout", "payments-prod", "steady", None, 20261130),
    ("search", "search-api", "search-prod", "bursty", "errors", 20261201),
)


# team, service, namespace, traffic class: its versions' traffic is served by canary_dev_traffic
PROMETHEUS_DEMO = ("payments", "cart", "payments-prod", "steady")


def _team_namespace(team_slug: str, namespace: str, created: list[str]) -> bool:
    """Make `namespace` the team's if nobody owns it; False if another team does."""
    owner = namespace_owner(namespace)
    if owner not in (None, team_slug):
        return False
    if owner is None:
        # The demo's namespaces belong to their teams, as a provisioned environment's would.
        get_backend().apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace, "labels": {TEAM_LABEL: team_slug}},
                }
            ]
        )
        created.append(f"namespace {namespace} of team {team_slug}")
    return True


def _resumable(service: Service, team: Team) -> bool:
    """Whether a seed stopped between this service and its rollout: the demo's own (its team's,
    simulated) and no rollout yet."""
    return (
        service.team_id == team.pk
        and service.metrics_source == MetricsSource.SIMULATED
        and not service.rollouts.exists()
    )


def seed_demo() -> list[str]:
    """Create the demo services and start a rollout on each (idempotent: a service a seed
    interrupted before its rollout gets one); return what was created."""
    actor = system_actor("seed")
    created: list[str] = []
    for team_slug, name, namespace, traffic, regression, seed in DEMO:
        team = Team.objects.filter(slug=team_slug).first()
        service = Service.objects.filter(namespace=namespace, name=name).first()
        if team is None or (service is not None and not _resumable(service, team)):
            continue
        if service is None:
            if not _team_namespace(team_slug, namespace, created):
                continue  # another team's namespace: no demo service there
            service = services.service_create(
                actor=actor, team=team, name=name, namespace=namespace, sim_traffic_class=traffic
            )
            created.append(f"canary service {namespace}/{name}")
        if regression:
            services.service_set_simulated_regression(
                actor=actor, service=service, version="v2", regression=regression
            )
            created.append(f"simulated {regression} regression in {name} v2")
        services.rollout_create(
            actor=actor,
            service=service,
            baseline_version="v1",
            canary_version="v2",
            steps=[5, 25, 50, 100],
            ticks_per_step=5,
            tick_seconds=1.5,
            seed=seed,  # fixed: the demo always shows the same promotion and rollback
        )
        created.append(f"rollout {name} v1 -> v2")
    return created


def seed_prometheus_demo() -> list[str]:
    """Register the demo service whose metrics come from KILN_PROMETHEUS_URL (idempotent).

    It names no server of its own, so it reads whichever server that setting names (make dev
    points it at its own Prometheus). No rollout is started: a rollout's tick must span a
    scrape interval, which the rollout form's default (60 s) does.
    """
    team_slug, name, namespace, traffic = PROMETHEUS_DEMO
    created: list[str] = []
    team = Team.objects.filter(slug=team_slug).first()
    if team is None or Service.objects.filter(namespace=namespace, name=name).exists():
        return created
    if not _team_namespace(team_slug, namespace, created):
        return created
    services.service_create(
        actor=system_actor("seed"),
        team=team,
        name=name,
        namespace=namespace,
        metrics_source=MetricsSource.PROMETHEUS,
        sim_traffic_class=traffic,
    )
    created.append(f"canary service {namespace}/{name} read from Prometheus")
    return created
