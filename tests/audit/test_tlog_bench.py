"""audit_tlog_bench runs small: a real server, every figure present, every fault caught by name."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from audit.models import ChainEvent
from kiln import benchjson
from tests.audit.conftest import wipe_chain


@pytest.fixture
def committed(transactional_db):
    yield
    wipe_chain()


def test_the_bench_measures_the_log_and_catches_each_fault(committed, settings):
    out = StringIO()
    call_command("audit_tlog_bench", "--entries", "700", "--batch", "100", "--checkpoint-every", "300",
                 "--requests", "20", "--bundles", "5", "--port", "9252", "--seeds", "tune",
                 "--json", stdout=out)  # fmt: skip
    result = json.loads(out.getvalue())
    assert benchjson.problems(result) == []
    assert result["entries"] == ChainEvent.objects.count() == 700
    assert result["seeds"]["used"] == "tune" and result["seeds"]["seed"] == 1000
    assert result["append_with_tree"]["appended"] == 700
    assert 0 < result["append_with_tree"]["tree_share_of_append"] < 1
    for kind in ("inclusion_proof", "tile", "consistency_proof", "checkpoint"):
        assert result["http"][kind]["n"] == 20 and result["http"][kind]["non_200"] == 0
    proof = result["proof_size"]
    assert proof["tree_size"] == 700 and proof["ceil_log2_n"] == 10
    assert 8 <= proof["longest_proof_hashes"] <= 10 and proof["within_bound"]
    assert result["offline_verify_one_event"]["n"] == 5
    assert result["tree_check"]["ok"] and result["tree_check"]["leaves"] == 700
    faults = result["faults"]
    assert faults["fork_at_leaf_index"] == 233
    for name in ("forked_log_witness", "forked_log_verifier", "rewritten_entry",
                 "truncated_tail_witness", "truncated_tail_verifier"):  # fmt: skip
        assert faults[name]["caught"], (name, faults[name])
        assert faults[name]["index_named"] is not None, (name, faults[name])
    assert "refusing size 1700" in faults["forked_log_witness"]["message"]
    assert "rollback" in faults["truncated_tail_witness"]["message"]
