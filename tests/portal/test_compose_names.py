"""Every name and label value composition derives stays within Kubernetes' limits, for any
namespace the request form allows (up to 63 characters) and any mix of components: a NodePool
named after a long namespace was 68 characters, and its name is a label value on every node."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.cluster.labels import value_problem
from portal import compose as c
from portal.compose.capacity import A_NODE_SELECTOR
from scheduler.simulation.provisioner import generated_name
from tests.portal.test_compose import spec

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kinds whose names are DNS-1123 labels, or become label values (karpenter.sh/nodepool).
LABEL_NAMED = {"Namespace", "Service", "NodePool"}

# Any DNS label, and often one near the 63-character limit, where derived names overflow.
namespaces = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True) | st.integers(
    50, 63
).flatmap(lambda n: st.from_regex(rf"[a-z0-9][-a-z0-9]{{{n - 2}}}[a-z0-9]", fullmatch=True))


def _label_maps(obj):
    """Every labels, matchLabels and nodeSelector mapping inside a manifest."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("labels", "matchLabels", "nodeSelector") and isinstance(value, dict):
                yield value
            else:
                yield from _label_maps(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _label_maps(item)


@settings(max_examples=60, deadline=None)
@given(
    namespace=namespaces,
    spot=st.booleans(),
    gpu=st.sampled_from([0, 2]),
    control_plane=st.booleans(),
    database=st.booleans(),
)
def test_every_derived_name_and_label_value_fits(namespace, spot, gpu, control_plane, database):
    manifests = c.compose(
        spec(namespace=namespace, spot_node_pool=spot, gpu=gpu, tenant_control_plane=control_plane,
             database=database, datastore="etcd-a" if control_plane else "")
    )  # fmt: skip
    for manifest in manifests:
        meta = manifest["metadata"]
        assert len(meta["name"]) <= 253, meta["name"]
        if manifest["kind"] in LABEL_NAMED:
            assert len(meta["name"]) <= 63 and DNS_LABEL.match(meta["name"]), meta["name"]
        for labels in _label_maps(manifest):
            for key, value in labels.items():
                assert value_problem(key, str(value)) is None, (manifest["kind"], key, value)
        if manifest["kind"] == "NodePool":
            # A node the simulated Karpenter launches for it is named from it, and its name
            # is the node's kubernetes.io/hostname label.
            node = generated_name(f"{meta['name']}-")
            assert value_problem("kubernetes.io/hostname", node) is None, node
        selector = (meta.get("annotations") or {}).get(A_NODE_SELECTOR)
        if selector:
            for pair in selector.split(","):
                key, _, value = pair.partition("=")
                assert value_problem(key, value) is None, (key, value)


def test_a_long_namespaces_pool_keeps_its_name_apart_from_another_long_one():
    a = c.capacity.pool_name(spec(namespace="a" * 60 + "-one"))
    b = c.capacity.pool_name(spec(namespace="a" * 60 + "-two"))
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert c.capacity.pool_name(spec(namespace="payments-web")) == "kiln-payments-web"


@given(long=namespaces, plain=namespaces)
def test_no_long_namespaces_pool_is_named_as_another_namespaces_plain_pool(long, plain):
    """A hashed name is always 63 characters, a plain one at most 54: they never meet, even
    for a namespace written to look like a hashed one."""
    named = c.capacity.pool_name(spec(namespace=long))
    lookalike = named.removeprefix("kiln-")
    assert c.capacity.pool_name(spec(namespace=lookalike)) != named or lookalike == long
    if long != plain:
        assert named != c.capacity.pool_name(spec(namespace=plain))
