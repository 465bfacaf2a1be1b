"""provision_bench stands in for autovacuum where the server has it off, and only there."""

from __future__ import annotations

import pytest
from django.db import connection

from bench.portal.harness import stand_in_for_autovacuum


def _vacuums(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = %s", [table])
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_the_bench_vacuums_the_database_only_when_the_servers_autovacuum_is_off():
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        autovacuum = cursor.fetchone()[0] == "on"
    before = _vacuums("portal_environment")
    found = stand_in_for_autovacuum()
    assert found["autovacuum"] is autovacuum
    assert found["vacuumed"] is (not autovacuum)
    assert found["dead_rows"] >= 0
    # A manual VACUUM is counted apart from autovacuum's: it ran exactly when it said it did.
    assert _vacuums("portal_environment") == before + (0 if autovacuum else 1)
