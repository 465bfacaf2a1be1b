"""External anchors for signed checkpoints: one small interface, a directory and a Git repository.

An anchor keeps every checkpoint somewhere the database's owner does not
control, so truncating the chain and its checkpoint table is still detectable.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Protocol

from django.conf import settings


class AnchorError(Exception):
    """An anchor could not store or read a checkpoint."""


class Anchor(Protocol):
    """Where signed checkpoints are pushed, and read back by the verifier."""

    name: str

    def push(self, size: int, note: str) -> str:
        """Store one signed checkpoint note; returns a reference (file name, commit)."""
        ...

    def latest(self) -> str | None:
        """The most recently pushed note, or None."""
        ...


class DirectoryAnchor:
    """Checkpoints as files `checkpoint-<size>.txt` plus `latest` in a directory (e.g. a mounted bucket)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = f"dir:{self.path}"

    def push(self, size: int, note: str) -> str:
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.path / f"checkpoint-{size:012d}.txt"
        for dest in (target, self.path / "latest"):
            tmp = dest.with_name(dest.name + ".tmp")
            tmp.write_text(note, encoding="utf-8")
            os.replace(tmp, dest)
        return target.name

    def latest(self) -> str | None:
        path = self.path / "latest"
        return path.read_text(encoding="utf-8") if path.exists() else None


class GitAnchor:
    """Checkpoints committed to a Git repository, one commit per checkpoint (file `checkpoint`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = f"git:{self.path}"

    def _git(self, *args: str) -> str:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "Kiln audit writer",
            "GIT_AUTHOR_EMAIL": "audit@kiln.local",
            "GIT_COMMITTER_NAME": "Kiln audit writer",
            "GIT_COMMITTER_EMAIL": "audit@kiln.local",
        }
        result = subprocess.run(
            ["git", "-C", str(self.path), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        if result.returncode != 0:
            raise AnchorError(f"git {args[0]} failed: {result.stderr.strip()[:200]}")
        return result.stdout

    def push(self, size: int, note: str) -> str:
        if not (self.path / ".git").exists():
            self.path.mkdir(parents=True, exist_ok=True)
            self._git("init", "-q")
        (self.path / "checkpoint").write_text(note, encoding="utf-8")
        self._git("add", "checkpoint")
        self._git("commit", "-q", "--allow-empty", "-m", f"audit checkpoint {size}")
        return self._git("rev-parse", "HEAD").strip()

    def latest(self) -> str | None:
        if not (self.path / ".git").exists():
            return None
        try:
            return self._git("show", "HEAD:checkpoint")
        except AnchorError:
            return None


def parse_anchors(spec: str) -> list[Anchor]:
    """`dir:/path,git:/path` -> anchors; an empty spec means none."""
    anchors: list[Anchor] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        kind, _, path = item.partition(":")
        if kind == "dir" and path:
            anchors.append(DirectoryAnchor(path))
        elif kind == "git" and path:
            anchors.append(GitAnchor(path))
        else:
            raise AnchorError(f"unknown anchor {item!r}; use dir:/path or git:/path")
    return anchors


def configured_anchors() -> list[Anchor]:
    """The anchors of KILN_AUDIT_ANCHORS."""
    return parse_anchors(settings.KILN_AUDIT_ANCHORS or "")
