"""Witness the audit log: check each new checkpoint is consistent with the last one seen, cosign it."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit import witness
from audit.chain import notes


class Command(BaseCommand):
    help = (
        "A witness of the audit transparency log, needing only the log's public key and URL: "
        "fetch the latest checkpoint, prove from the tiles that it extends the last one this "
        "witness cosigned, then cosign it and post the cosignature. Refuses rollbacks and forks "
        "(exit 1, saying which); --once checks one checkpoint, otherwise every --interval."
    )

    def add_arguments(self, parser):
        parser.add_argument("--log-url", help="the log's base URL (it serves /audit/tlog/...)")
        parser.add_argument("--public-key", type=Path, help="the log's verifier key file")
        parser.add_argument(
            "--key", type=Path, required=True, help="this witness's Ed25519 PEM key"
        )
        parser.add_argument("--name", required=True, help="this witness's key name")
        parser.add_argument("--state", type=Path, help="where the last cosigned checkpoint is kept")
        parser.add_argument("--create-key", action="store_true", help="generate --key if missing")
        parser.add_argument(
            "--print-key", action="store_true", help="print this witness's verifier key and exit"
        )
        parser.add_argument("--token", default="", help="bearer token, when the log is not public")
        parser.add_argument(
            "--no-submit", action="store_true", help="cosign but do not post the cosignature"
        )
        parser.add_argument("--once", action="store_true", help="check one checkpoint and exit")
        parser.add_argument("--interval", type=float, default=30.0, help="seconds between polls")

    def handle(self, *args, **opts):
        try:
            key = notes.load_or_create_private_key(opts["key"], create=opts["create_key"])
        except (notes.NoteError, ValueError, OSError) as exc:
            raise CommandError(f"witness key {opts['key']}: {exc}") from exc
        if opts["print_key"]:
            self.stdout.write(witness.witness_verifier_key(opts["name"], key.public_key()))
            return
        for needed in ("log_url", "public_key", "state"):
            if not opts[needed]:
                raise CommandError(f"--{needed.replace('_', '-')} is required to witness a log")
        try:
            log = witness.HttpLog(opts["log_url"], token=opts["token"])
            log_key = opts["public_key"].read_text(encoding="utf-8")
            notes.parse_verifier_key(log_key)
        except (ValueError, OSError, notes.NoteError) as exc:
            raise CommandError(str(exc)) from exc
        if opts["once"]:
            if not self.step(log, log_key, key, opts):
                raise SystemExit(1)
            return
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
        try:
            while not stop.is_set():
                self.step(log, log_key, key, opts)
                stop.wait(opts["interval"])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def step(self, log: witness.HttpLog, log_key: str, key, opts) -> bool:
        """One poll: False when the checkpoint was refused (the state is then left as it was)."""
        state = witness.load_state(opts["state"])
        try:
            note = log.checkpoint()
            new = witness.witness_step(
                state=state, note=note, log_key=log_key, tiles=witness.tree_tiles(log.tile)
            )
        except witness.WitnessRefused as exc:
            self.stderr.write(f"REFUSED ({exc.kind}): {exc}")
            return False
        except witness.LogUnavailable as exc:
            self.stderr.write(f"cannot read the log: {exc}; nothing cosigned")
            return True
        witness.save_state(
            opts["state"], new
        )  # kept before it is posted: never cosign a fork later
        # Posted again when unchanged: the log keeps one cosignature a witness, so a post that
        # failed last time is made good and one that worked changes nothing.
        cosigned = witness.cosigned_note(new, opts["name"], key, witness.now())
        if opts["no_submit"]:
            self.stdout.write(cosigned)
            return True
        try:
            result = log.submit(cosigned)
        except witness.LogUnavailable as exc:
            self.stderr.write(f"cosigned size {new.size} but could not post it: {exc}")
            return True
        was = f"from size {state.size}" if state else "the first checkpoint this witness saw"
        self.stdout.write(f"cosigned size {new.size} ({was}): {result}")
        return True
