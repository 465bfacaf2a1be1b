"""Every list and detail endpoint agrees with the one visibility rule (kiln.identity.visibility).

A fixed world (three teams, each with an environment, a service and its rollout, and a chaos
experiment) is built once per test; hypothesis then draws who asks: one or two roles, member of
no team, one or two teams (never the third, so something is always hidden), with the central
change board (`KILN_APPROVERS_GLOBAL`) on or off. For each such person every API and page list
returns exactly the rows `visibility.sees` allows, every detail answers 200 for a visible row
and, for a hidden one, the very answer a missing row gets. System actors cannot sign in, so
their selectors are checked against the same rule, as are people's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client, override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from canary import selectors as canary_selectors
from canary import services as canary_services
from canary.chaos import selectors as chaos_selectors
from canary.chaos.services import experiment_create
from kiln.identity import components, visibility
from kiln.identity import selectors as identity_selectors
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import (
    PLATFORM_ADMIN,
    ROLES,
    Actor,
    actor_for_user,
    can_view_chaos,
    can_view_environment,
    can_view_rollout,
    has_role,
    system_actor,
)
from portal import selectors as portal_selectors
from portal.services import environment_request_submit
from tests.chaos.test_chaos_support import abort_data
from tests.portal.conftest import request_data
from tests.scheduler.conftest import cluster_node, cluster_pod

pytestmark = pytest.mark.django_db

TEAMS = ("alpha", "beta", "gamma")
MEMBER_OF = st.sampled_from([(), ("alpha",), ("beta",), ("alpha", "beta")])
ROLE_SETS = st.sets(st.sampled_from(ROLES), min_size=1, max_size=2)
# Bounded: each example signs a person in and asks every endpoint (about 17 requests).
API_EXAMPLES = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PAGE_EXAMPLES = settings(API_EXAMPLES, max_examples=15)


@dataclass(frozen=True)
class Row:
    """One object of the world: its kind (visibility.KINDS), id as URLs carry it, owning team
    (None: a node or pod no team owns)."""

    kind: str
    id: str
    team: str | None


@dataclass(frozen=True)
class World:
    """The fixed data set: every row by kind."""

    rows: tuple[Row, ...]

    def of(self, kind: str) -> list[Row]:
        """The rows of one kind."""
        return [r for r in self.rows if r.kind == kind]

    def seen_by(self, actor: Actor, kind: str) -> set[str]:
        """Ids of the rows of `kind` the rule lets `actor` see."""
        return {r.id for r in self.of(kind) if visibility.sees(actor, kind, r.team)}


def build_world(backend: Any) -> World:
    """Three teams, each owning a namespace with pods, an environment, a service with a rollout
    and an experiment; made by a platform admin through the services."""
    root_user = get_user_model().objects.create_user("vis-root")
    root = Actor("vis-root", roles=frozenset({PLATFORM_ADMIN}), user_id=root_user.pk)
    rows: list[Row] = []
    for slug in TEAMS:
        team = Team.objects.create(slug=slug, name=slug.title())
        namespace = f"ns-{slug}"
        backend.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace, "labels": {"kiln.dev/team": slug}},
                },
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "web-0", "namespace": namespace, "labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "web:1"}]},
                },
            ]
        )
        env, _ = environment_request_submit(
            actor=root, data=request_data(team=slug, name=f"app-{slug}")
        )
        rows.append(Row(visibility.ENVIRONMENTS, env.public_id, slug))
        service = canary_services.service_create(
            actor=root, team=team, name="web", namespace=namespace
        )
        rows.append(Row("services", str(service.pk), slug))
        rollout = canary_services.rollout_create(
            actor=root, service=service, baseline_version="v1", canary_version="v2"
        )
        rows.append(Row(visibility.ROLLOUTS, str(rollout.pk), slug))
        exp = experiment_create(
            actor=root,
            data=abort_data(namespace=namespace, max_pods=1),
            start=False,
            backend=backend,
        )
        rows.append(Row(visibility.EXPERIMENTS, str(exp.pk), slug))
        rows.append(Row(visibility.TEAMS, slug, slug))
        cluster_node(f"node-{slug}", nodepool=f"kiln-{slug}", environment=namespace)
        rows.append(Row(visibility.NODES, f"node-{slug}", slug))
        cluster_pod(f"pod-{slug}-1", f"node-{slug}", namespace=namespace)
        rows.append(Row(visibility.PODS, f"pod-{slug}-1", slug))
    # Shared capacity, running a pod of the platform's own namespace.
    cluster_node("node-shared", nodepool="general")
    rows.append(Row(visibility.NODES, "node-shared", None))
    cluster_pod("ds-platform-1", "node-shared", namespace="kube-system", owner="DaemonSet")
    rows.append(Row(visibility.PODS, "ds-platform-1", None))
    return World(tuple(rows))


@pytest.fixture
def world(chaos_settings) -> World:
    from kiln.cluster.backends import get_backend

    return build_world(get_backend("simulated"))


@pytest.fixture
def chaos_settings(settings):
    """The simulated cluster with no delays; experiments are defined, never started."""
    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    settings.KILN_CHAOS_AUTORUN = False
    return settings


def person(roles: set[str], teams: tuple[str, ...]) -> tuple[Actor, Client]:
    """A signed-in person with these roles (groups) and memberships, and the Actor they act as."""
    name = "vis-" + "-".join(sorted(roles)) + "--" + "-".join(teams)
    user, created = get_user_model().objects.get_or_create(username=name)
    if created:
        user.groups.set([Group.objects.get_or_create(name=r)[0] for r in roles])
        for slug in teams:
            Membership.objects.create(
                user=user, team=Team.objects.get(slug=slug), source=Membership.ADMIN
            )
    client = Client()
    client.force_login(user)
    return actor_for_user(user), client


# kind -> (list URL, how to read the listed ids, detail URL or None, roles the view admits: None
# means any Kiln role). The API lists and details every kind a person can see over HTTP.
API = {
    visibility.ENVIRONMENTS: (
        "/api/v1/environments/?limit=200",
        lambda body: {e["id"] for e in body["results"]},
        "/api/v1/environments/{}/",
        None,
    ),
    visibility.ROLLOUTS: (
        "/api/v1/rollouts/?limit=200",
        lambda body: {r["id"] for r in body["results"]},
        "/api/v1/rollouts/{}/",
        None,
    ),
    "services": (
        "/api/v1/canary/services/",
        lambda body: {s["id"] for s in body},
        None,
        None,
    ),
    visibility.EXPERIMENTS: (
        "/api/v1/chaos/experiments/?limit=200",
        lambda body: {e["id"] for e in body["results"]},
        "/api/v1/chaos/experiments/{}/",
        None,  # any Kiln role reads, as on the pages: an approver its team's experiments
    ),
    visibility.TEAMS: (
        "/api/v1/teams/",
        lambda body: {t["slug"] for t in body},
        None,
        None,
    ),
    visibility.NODES: (
        "/api/v1/scheduler/nodes/",
        lambda body: {n["name"] for n in body["results"]},
        None,
        None,
    ),
    # A pod is named on its node only to who may see it (the others are counted).
    visibility.PODS: (
        "/api/v1/scheduler/nodes/",
        lambda body: {p["name"] for n in body["results"] for p in n["pods"]},
        None,
        None,
    ),
}
# kind -> (list page, detail page or None). A page names a row by its id (links carry it).
PAGES = {
    visibility.ENVIRONMENTS: ("/environments/", "/environments/{}/"),
    visibility.ROLLOUTS: ("/rollouts/", "/rollouts/{}/"),
    visibility.EXPERIMENTS: ("/chaos/", "/chaos/{}/"),
    visibility.NODES: ("/scheduler/", None),
    visibility.PODS: ("/scheduler/", None),
}


def rule_kind(kind: str) -> str:
    """Services are seen with their rollouts (visibility.ROLLOUTS)."""
    return visibility.ROLLOUTS if kind == "services" else kind


def expected(world: World, actor: Actor, kind: str) -> set[str]:
    """Ids of `kind` the rule lets `actor` see (services by the rollouts' rule)."""
    return {r.id for r in world.of(kind) if visibility.sees(actor, rule_kind(kind), r.team)}


def missing_id(kind: str) -> str:
    """An id no row of `kind` has."""
    return uuid.uuid4().hex[:12] if kind == visibility.ENVIRONMENTS else str(uuid.uuid4())


def test_the_world_has_every_kind_in_every_team(world):
    for kind in (*API, *PAGES):
        assert {r.team for r in world.of(kind)} >= set(TEAMS), kind


def test_every_api_list_and_detail_agrees_with_the_rule(world):
    @API_EXAMPLES
    @given(roles=ROLE_SETS, teams=MEMBER_OF, grant=st.booleans())
    def check(roles: set[str], teams: tuple[str, ...], grant: bool) -> None:
        actor, client = person(roles, teams)
        with override_settings(KILN_APPROVERS_GLOBAL=grant):
            for kind, (url, ids_of, detail, admits) in API.items():
                response = client.get(url)
                if admits is not None and not has_role(actor, *admits):
                    assert response.status_code == 403, (kind, roles)
                    continue
                assert response.status_code == 200, (kind, response.content)
                assert ids_of(response.json()) == expected(world, actor, kind), (kind, actor)
                if detail is None:
                    continue
                missing = client.get(detail.format(missing_id(kind)))
                assert missing.status_code == 404
                for row in world.of(kind):
                    got = client.get(detail.format(row.id))
                    if visibility.sees(actor, rule_kind(kind), row.team):
                        assert got.status_code == 200, (kind, row, actor)
                    else:
                        # Hidden is the same answer as missing: nothing confirms it exists.
                        assert (got.status_code, got.json()) == (404, missing.json())
            # The audit chain: all of it or none (visibility.AUDIT).
            events = client.get("/api/v1/audit/events/")
            reads_audit = visibility.scope(actor, visibility.AUDIT).every
            assert events.status_code == (200 if reads_audit else 403), (actor, events.content)

    check()


def test_every_page_list_and_detail_agrees_with_the_rule(world):
    @PAGE_EXAMPLES
    @given(roles=ROLE_SETS, teams=MEMBER_OF, grant=st.booleans())
    def check(roles: set[str], teams: tuple[str, ...], grant: bool) -> None:
        actor, client = person(roles, teams)
        with override_settings(KILN_APPROVERS_GLOBAL=grant):
            for kind, (url, detail) in PAGES.items():
                page = client.get(url)
                assert page.status_code == 200, (kind, page.status_code)
                listed = {r.id for r in world.of(kind) if r.id in page.content.decode()}
                assert listed == expected(world, actor, kind), (kind, actor)
                if detail is None:
                    continue
                missing = client.get(detail.format(missing_id(kind)))
                assert missing.status_code == 404
                for row in world.of(kind):
                    got = client.get(detail.format(row.id))
                    allowed = visibility.sees(actor, kind, row.team)
                    assert got.status_code == (200 if allowed else 404), (kind, row, actor)
                    if not allowed:
                        assert row.id not in got.content.decode()

    check()


def selected(actor: Actor) -> dict[str, set[str]]:
    """What each selector lists for `actor`, by kind."""
    return {
        visibility.ENVIRONMENTS: {
            e.public_id for e in portal_selectors.environment_list(viewer=actor)
        },
        visibility.ROLLOUTS: {str(r.pk) for r in canary_selectors.rollout_list(viewer=actor)},
        "services": {str(s.pk) for s in canary_selectors.service_list(viewer=actor)},
        visibility.EXPERIMENTS: {str(e.pk) for e in chaos_selectors.experiment_list(viewer=actor)},
        visibility.TEAMS: {t.slug for t in identity_selectors.team_list(viewer=actor)},
    }


PREDICATES = {
    visibility.ENVIRONMENTS: can_view_environment,
    visibility.ROLLOUTS: can_view_rollout,
    "services": can_view_rollout,
    visibility.EXPERIMENTS: can_view_chaos,
}


def assert_selectors_and_predicates_follow_the_rule(world: World, actor: Actor) -> None:
    """Each selector lists exactly the rule's rows; each predicate answers as the rule does."""
    for kind, ids in selected(actor).items():
        assert ids == expected(world, actor, kind), (kind, actor)
        predicate = PREDICATES.get(kind)
        for row in world.of(kind) if predicate else ():
            assert predicate(actor, row.team) is (row.id in ids), (kind, row, actor)


def test_every_system_actor_lists_what_its_predicates_allow(world):
    for component in sorted(components.COMPONENTS):
        assert_selectors_and_predicates_follow_the_rule(world, system_actor(component))


def test_the_environment_components_see_every_environment_in_lists_too(world):
    # The predicates always let the lifecycle's components see an environment; the lists
    # used to show them none.
    everything = {r.id for r in world.of(visibility.ENVIRONMENTS)}
    for component in ("policy-gate", "auto-approval", "provisioner", "reaper"):
        actor = system_actor(component)
        listed = {e.public_id for e in portal_selectors.environment_list(viewer=actor)}
        assert listed == everything, component


def test_every_persons_selectors_and_predicates_follow_the_rule(world, settings):
    for grant in (False, True):
        settings.KILN_APPROVERS_GLOBAL = grant
        for role in ROLES:
            for teams in ((), ("alpha",), ("alpha", "beta")):
                actor = Actor(f"p-{role}", roles=frozenset({role}), teams=frozenset(teams))
                assert_selectors_and_predicates_follow_the_rule(world, actor)
