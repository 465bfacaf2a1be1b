"""Service hosts of a namespace (canary.hosts): the accepted forms, and properties over generated hosts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canary.hosts import FOREIGN, MALFORMED, HostRefused, canonical_service_host

SHOP = "shop"
FQDN = "checkout.shop.svc.cluster.local"


@pytest.mark.parametrize(
    "host",
    [
        "checkout",
        "checkout.shop",
        "checkout.shop.svc",
        "checkout.shop.svc.cluster.local",
        "checkout.shop.svc.cluster.local.",  # absolute name
        "CheckOut.SHOP.Svc.Cluster.Local",  # DNS is case-insensitive
        "checkout.",
    ],
)
def test_every_accepted_form_is_stored_fully_qualified(host):
    assert canonical_service_host(host, SHOP) == FQDN


@pytest.mark.parametrize(
    "host",
    [
        "checkout.payments",
        "checkout.payments.svc",
        "checkout.payments.svc.cluster.local",
        "CHECKOUT.PAYMENTS.SVC.CLUSTER.LOCAL.",
        "example.com",  # read as service `example` of namespace `com`: not this namespace either
    ],
)
def test_a_host_naming_another_namespace_is_foreign(host):
    with pytest.raises(HostRefused) as refused:
        canonical_service_host(host, SHOP)
    assert refused.value.kind == FOREIGN and host.lower().split(".")[1] in refused.value.reason


@pytest.mark.parametrize(
    "host",
    [
        "",
        "*",
        "*.shop.svc.cluster.local",
        "checkout.*",
        "10.0.0.1",
        "127.1",
        "0x7f.1",
        "::1",
        "[::1]",
        "checkout:8080",
        "checkout.shop.svc.cluster.local:80",
        "http://checkout",
        "user@checkout",
        "checkout.shop.svc.cluster.evil",
        "checkout.shop.svc.cluster.local.evil",
        "checkout.shop.svc.cluster",
        "checkout.shop.example.com",
        "checkout.shop.svc.cluster.local..",
        "checkout..shop",
        ".checkout",
        " checkout",
        "checkout ",
        "check out",
        "checkout\n",
        "checkout\t.shop",
        "-checkout",
        "checkout-",
        "1checkout",  # a Service name starts with a letter
        "check_out",
        "a" * 64,
        "checkout." + "s" * 64,
        "\u212aafka",  # KELVIN SIGN lower-cases to ASCII "k": refused before folding
        "checkout.\u0130stanbul",  # dotted capital I
        "ch\u00e9ckout",
        "checkout\u200b",  # zero-width space
        "ｃｈｅｃｋｏｕｔ",  # fullwidth
        "checkout.shop\u3002svc",  # ideographic full stop
    ],
)
def test_malformed_hosts_are_refused(host):
    with pytest.raises(HostRefused) as refused:
        canonical_service_host(host, SHOP)
    assert refused.value.kind == MALFORMED and refused.value.reason


def test_a_namespace_that_is_not_a_label_is_refused_whatever_the_host():
    for namespace in ("", "Shop", "shop.payments", "shop ", "a" * 64):
        with pytest.raises(HostRefused):
            canonical_service_host("checkout", namespace)


# --- properties -------------------------------------------------------------------------------

label = st.from_regex(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
namespaces = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
suffixes = st.sampled_from(["", ".svc", ".svc.cluster.local"])


def _case(text: str, flips: list[bool]) -> str:
    return "".join(
        c.upper() if f else c for c, f in zip(text, flips + [False] * len(text), strict=False)
    )


@settings(max_examples=300)
@given(svc=label, ns=namespaces, suffix=suffixes, flips=st.lists(st.booleans()), dot=st.booleans())
def test_any_spelling_of_an_own_service_resolves_to_it(svc, ns, suffix, flips, dot):
    host = _case(f"{svc}.{ns}{suffix}" + ("." if dot else ""), flips)
    assert canonical_service_host(host, ns) == f"{svc}.{ns}.svc.cluster.local"


@settings(max_examples=300)
@given(svc=label, own=namespaces, other=namespaces, suffix=suffixes, flips=st.lists(st.booleans()))
def test_no_spelling_of_a_foreign_service_is_accepted(svc, own, other, suffix, flips):
    if own == other:
        return
    host = _case(f"{svc}.{other}{suffix}", flips)
    with pytest.raises(HostRefused) as refused:
        canonical_service_host(host, own)
    assert refused.value.kind == FOREIGN


tricks = st.one_of(
    st.text(max_size=80),
    st.text(
        alphabet=st.sampled_from("abc.-*:/@ \t\n\u212a\u0130\u3002\uff0e0123456789"), max_size=40
    ),
    st.builds(
        lambda svc, ns, suffix, pad, tail: f"{pad}{svc}.{ns}{suffix}{tail}",
        label,
        namespaces,
        st.sampled_from(["", ".svc", ".svc.cluster.local", ".svc.cluster.local.evil", ".com"]),
        st.sampled_from(["", " ", "\t", "\u200b", "*."]),
        st.sampled_from(["", ".", "..", " ", ":80", "\u3002", "\x00"]),
    ),
)


@settings(max_examples=1000)
@given(host=tricks, own=namespaces)
def test_whatever_is_accepted_is_a_service_of_the_own_namespace(host, own):
    """The one guarantee: an accepted host resolves into `own`, and nowhere else."""
    try:
        result = canonical_service_host(host, own)
    except HostRefused as refused:
        assert refused.kind in (MALFORMED, FOREIGN)
        return
    svc, ns, rest = result.split(".", 2)
    assert ns == own and rest == "svc.cluster.local"
    assert result.isascii() and svc[0].isalpha()
    # What was accepted names this service in one of the four forms, nothing more.
    name = host.lower().removesuffix(".")
    assert name in {svc, f"{svc}.{own}", f"{svc}.{own}.svc", f"{svc}.{own}.svc.cluster.local"}
