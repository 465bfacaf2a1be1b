"""Audit names that changed: events keep the names they were written with, readers accept both.

Chaos moved out of canary into its own app (label `chaos`). Until then its events were
recorded as `canary.experiment.*`, `canary.lease.*` and `canary.fault.*` about targets
`canary.chaosexperiment:<id>`; from then on as `chaos.*` about `chaos.chaosexperiment:<id>`.
The chain is never rewritten (the hashes cover the names), so a filter by either name
finds the events of both. Pure: no Django.
"""

from __future__ import annotations

# (old prefix, new prefix): every action that starts with one is the same as the other.
RENAMED_ACTIONS: tuple[tuple[str, str], ...] = (
    ("canary.experiment.", "chaos.experiment."),
    ("canary.lease.", "chaos.lease."),
    ("canary.fault.", "chaos.fault."),
)
RENAMED_TARGETS: tuple[tuple[str, str], ...] = (
    ("canary.chaosexperiment:", "chaos.chaosexperiment:"),
)


def _both(name: str, pairs: tuple[tuple[str, str], ...]) -> list[str]:
    """`name` and, if it starts with a renamed prefix, the same name under the other prefix."""
    names = [name]
    for old, new in pairs:
        if name.startswith(old):
            names.append(new + name[len(old) :])
        elif name.startswith(new):
            names.append(old + name[len(new) :])
    return names


def action_names(action: str) -> list[str]:
    """The exact actions an exact action filter matches: `chaos.fault.injected` also finds
    `canary.fault.injected`, and the other way round."""
    return _both(action, RENAMED_ACTIONS)


def action_prefixes(prefix: str) -> list[str]:
    """The prefixes a prefix filter (ending in '.') matches.

    A renamed prefix matches its old form too (`chaos.fault.` finds `canary.fault.`), and a
    prefix that covers new names covers their old ones (`chaos.` finds `canary.experiment.`,
    `canary.lease.` and `canary.fault.`). `canary.` already covers the old chaos names.
    """
    prefixes = _both(prefix, RENAMED_ACTIONS)
    for old, new in RENAMED_ACTIONS:
        if new.startswith(prefix) and old not in prefixes:
            prefixes.append(old)
    return prefixes


def target_names(target: str) -> list[str]:
    """The targets an exact target filter matches: a chaos experiment under either label."""
    return _both(target, RENAMED_TARGETS)
