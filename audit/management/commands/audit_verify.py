"""Verify the whole audit chain: hashes, links, checkpoint signatures and coverage."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from audit.chain.verification import verify_and_store


class Command(BaseCommand):
    help = (
        "Recompute the audit chain and its Merkle tree (tiles and every checkpoint's signed root) "
        "and check every checkpoint; exit 0 when intact, 1 naming the first bad place otherwise."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--public-key", default=None, help="verifier key file (default: the configured one)"
        )
        parser.add_argument("--no-anchors", action="store_true", help="ignore the external anchors")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--no-record", action="store_true", help="do not store the outcome")
        parser.add_argument(
            "--no-tree", action="store_true", help="skip rebuilding the Merkle tree from the chain"
        )

    def handle(self, *args, **opts):
        report = verify_and_store(
            public_key=opts["public_key"],
            include_anchors=not opts["no_anchors"],
            store=not opts["no_record"],
            tree=not opts["no_tree"],
        )
        tree = report.tree
        if opts["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "ok": report.ok,
                        "checked": report.checked,
                        "checkpoints": report.checkpoints,
                        "head_seq": report.head_seq,
                        "first_bad_seq": report.problem.seq if report.problem else None,
                        "problem": report.problem.reason if report.problem else None,
                        "seconds": round(report.seconds, 3),
                        "tree": None
                        if tree is None
                        else {
                            "ok": tree.ok,
                            "leaves": tree.size,
                            "tiles": tree.tiles,
                            "signed_roots": tree.roots,
                            "problem": tree.problem.reason if tree.problem else None,
                        },
                    }
                )
            )
        elif report.ok:
            self.stdout.write(
                f"audit chain intact: {report.checked} entries, {report.checkpoints} signed checkpoints"
                + (f"; {tree.message}" if tree else "")
            )
        else:
            self.stderr.write(
                f"audit chain BROKEN at seq {report.problem.seq}: {report.problem.reason}"
            )
        if not report.ok:
            raise SystemExit(1)
