"""The nodes API names an environment by its id, as every other API does, or by its namespace;
an id the caller may not see is a 404, the same as one that does not exist."""

from __future__ import annotations

import pytest

from kiln.cluster.backends import get_backend

pytestmark = pytest.mark.django_db

NODES = "/api/v1/scheduler/nodes/"
PAY_ID, SEARCH_ID = "env_pay0dev0000000001", "env_search0dev000001"


@pytest.fixture
def labelled(cluster):
    """The fixture's two namespaces carry their environments' ids, as composition labels them."""
    get_backend().apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {
                "kiln.dev/team": team, "kiln.dev/request-id": env_id}}}
            for ns, team, env_id in (("pay-dev", "payments", PAY_ID),
                                     ("search-dev", "search", SEARCH_ID))
        ],
        field_manager="test",
    )  # fmt: skip
    return cluster


def names(response) -> list[str]:
    return [n["name"] for n in response.json()["results"]]


@pytest.mark.parametrize("environment", [PAY_ID, "pay-dev"], ids=["by-id", "by-namespace"])
def test_the_environment_filter_takes_an_id_or_a_namespace(labelled, api_client_for, environment):
    response = api_client_for("engineer", sub="alice", team="payments").get(
        NODES, {"environment": environment}
    )
    assert response.status_code == 200
    assert names(response) == ["ip-pay"]


def test_an_id_the_caller_may_not_see_is_a_404_like_a_missing_one(labelled, api_client_for):
    alice = api_client_for("engineer", sub="alice", team="payments")
    hidden = alice.get(NODES, {"environment": SEARCH_ID})
    missing = alice.get(NODES, {"environment": "env_nosuchenvironment"})
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["message"] == missing.json()["message"] == "no such environment"
    # Those who may see it get its nodes.
    admin = api_client_for("platform-admin", sub="root").get(NODES, {"environment": SEARCH_ID})
    assert admin.status_code == 200 and names(admin) == ["ip-search"]


@pytest.mark.parametrize(
    "environment",
    ["env_", "ENV_PAY", "env_Pay0dev", "pay_dev"],
    ids=["empty-id", "upper", "mixed", "underscore"],
)
def test_neither_an_id_nor_a_namespace_is_a_400_naming_the_field(
    labelled, api_client_for, environment
):
    response = api_client_for("engineer", sub="alice", team="payments").get(
        NODES, {"environment": environment}
    )
    assert response.status_code == 400
    assert response.json()["extra"]["fields"]["environment"] == [
        "An environment's id (env_…) or its namespace (DNS-1123 label, at most 63)."
    ]
