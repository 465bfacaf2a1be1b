"""Reads of the chain's state for people: the auditor's home card and what needs an auditor.

The chain needs a person when its last verification failed, when it has not been verified for
VERIFY_EVERY, when entries wait unsigned for longer than a few checkpoint periods, or when a
configured witness has stopped cosigning the checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from audit.models import ChainEvent, Checkpoint, Cosignature, VerificationRun
from audit.witness.selectors import witness_status

# A chain nobody has verified for this long asks an auditor to verify it.
VERIFY_EVERY = timedelta(hours=24)
# Periods of KILN_AUDIT_CHECKPOINT_SECONDS after which unsigned entries, or a witness that has
# not cosigned the latest checkpoint, are late rather than merely pending.
LATE_PERIODS = 3


@dataclass(frozen=True)
class Concern:
    """One thing about the chain an auditor should act on: a stable key (naming its state),
    a title, a detail and when it began."""

    key: str
    title: str
    detail: str
    since: datetime | None


def chain_card() -> dict[str, Any]:
    """The home card's figures: size, last checkpoint, last witness cosignature, last
    verification (each None while there is none)."""
    size = ChainEvent.objects.aggregate(head=Max("seq"))["head"] or 0
    checkpoint = Checkpoint.objects.order_by("-size", "-id").first()
    cosignature = (
        Cosignature.objects.select_related("checkpoint").order_by("-received_at", "-id").first()
    )
    verification = VerificationRun.objects.order_by("-finished_at").first()
    return {
        "size": size,
        "checkpoint": checkpoint,
        "unsigned": size - checkpoint.size if checkpoint else size,
        "cosignature": cosignature,
        "verification": verification,
        "concerns": chain_concerns(
            now=timezone.now(), size=size, checkpoint=checkpoint, verification=verification
        ),  # fmt: skip
    }


def _late() -> timedelta:
    return timedelta(seconds=LATE_PERIODS * float(settings.KILN_AUDIT_CHECKPOINT_SECONDS))


def chain_concerns(
    *,
    now: datetime | None = None,
    size: int | None = None,
    checkpoint: Checkpoint | None = None,
    verification: VerificationRun | None = None,
) -> list[Concern]:
    """What about the chain needs an auditor now, most serious first (reads what it is not given)."""
    now = now or timezone.now()
    if size is None:
        size = ChainEvent.objects.aggregate(head=Max("seq"))["head"] or 0
        checkpoint = Checkpoint.objects.order_by("-size", "-id").first()
        verification = VerificationRun.objects.order_by("-finished_at").first()
    out: list[Concern] = []
    if verification is not None and not verification.ok:
        out.append(Concern(
            key=f"audit.verification.failed:{verification.pk}",
            title=f"The audit chain failed verification at seq {verification.first_bad_seq}",
            detail=(verification.message or "the chain does not verify")[:200],
            since=verification.finished_at,
        ))  # fmt: skip
    elif size and (verification is None or now - verification.finished_at > VERIFY_EVERY):
        when = verification.finished_at if verification else None
        out.append(Concern(
            key=f"audit.verification.due:{when.date().isoformat() if when else 'never'}",
            title="Verify the audit chain",
            detail=(f"last verified {when:%Y-%m-%d %H:%M} UTC" if when else "never verified")
            + f"; {size} entries",
            since=when,
        ))  # fmt: skip
    late = _late()
    unsigned = size - (checkpoint.size if checkpoint else 0)
    if unsigned > 0:
        oldest = (
            ChainEvent.objects.filter(seq=(checkpoint.size if checkpoint else 0) + 1)
            .values_list("recorded_at", flat=True)
            .first()
        )
        if oldest is not None and now - oldest > late:
            out.append(Concern(
                key=f"audit.checkpoint.stale:{checkpoint.size if checkpoint else 0}",
                title="No checkpoint signs the newest audit entries",
                detail=f"{unsigned} entries unsigned since {oldest:%Y-%m-%d %H:%M} UTC; "
                "is the audit writer running?",
                since=oldest,
            ))  # fmt: skip
    if checkpoint is not None and now - checkpoint.signed_at > late:
        for witness in witness_status():
            if witness["size"] is None or witness["size"] < checkpoint.size:
                out.append(Concern(
                    key=f"audit.witness.behind:{witness['name']}:{checkpoint.size}",
                    title=f"Witness {witness['name']} is not cosigning",
                    detail=f"last cosigned size {witness['size'] or 'never'}; the latest "
                    f"checkpoint (size {checkpoint.size}) was signed "
                    f"{checkpoint.signed_at:%Y-%m-%d %H:%M} UTC",
                    since=checkpoint.signed_at,
                ))  # fmt: skip
    return out
