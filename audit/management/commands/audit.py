from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils.dateparse import parse_datetime

from audit import export, log
from plumbing.progress import Progress


class Command(BaseCommand):
    help = "Verify, export or checkpoint the audit log."
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="subcommand", required=True)
        verify = sub.add_parser(
            "verify", help="Recompute the hash chain; exit 1 at the first broken link."
        )
        verify.add_argument(
            "--checkpoints",
            help="A file of signed checkpoints (one JSON object a line) to check too.",
        )
        out = sub.add_parser("export", help="Print events as JSON Lines or CSV.")
        out.add_argument("--since", help="ISO 8601 time (inclusive)")
        out.add_argument("--until", help="ISO 8601 time (exclusive)")
        out.add_argument("--action", help="Only this action's events")
        out.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
        checkpoint = sub.add_parser(
            "checkpoint", help="Append a signed {seq, hash, at} of the chain head to FILE."
        )
        checkpoint.add_argument("file")

    def handle(self, *args, subcommand: str, **options):
        getattr(self, f"_{subcommand}")(**options)

    def _verify(self, checkpoints: str | None, **options):
        pins = [pin for _, pin in self._signed(checkpoints)] if checkpoints else []
        # Recorded as a full run: routine checks (GET /api/v1/audit/verify) start after it.
        bar = Progress("verifying the audit chain", 0, sys.stderr)

        def tracked(events, total):
            bar.total = total
            return bar.track(events)

        try:
            with bar:
                result = log.verify_full_now(by="cli", checkpoints=pins, progress=tracked)
        except DatabaseError as exc:  # the table is gone or unreadable: a verdict, not a traceback
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self.stderr.write(f"BROKEN: the audit log cannot be read ({reason})")
            sys.exit(1)
        if result.ok:
            suffix = f", {len(pins)} checkpoint(s) hold" if pins else ""
            self.stdout.write(f"ok: {result.checked} event(s), chain intact{suffix}")
            return
        where = f" at #{result.first_broken_seq}" if result.first_broken_seq is not None else ""
        self.stderr.write(
            f"BROKEN{where}: {result.problem} ({result.checked} event(s) verified before it)"
        )
        sys.exit(1)

    def _signed(self, path: str) -> list[tuple[int, dict]]:
        """The file's checkpoints; one not signed with this installation's key is a verdict."""
        pins = _read_checkpoints(path)
        for number, pin in pins:
            if not log.checkpoint_signature_ok(pin):
                self.stderr.write(
                    f"BROKEN: {path}, line {number}: the checkpoint at #{pin['seq']} is not "
                    "signed with this installation's checkpoint key (IMPRI_AUDIT_CHECKPOINT_KEY, "
                    "else SECRET_KEY): it was altered, or comes from another installation"
                )
                sys.exit(1)
        return pins

    def _export(
        self, since: str | None, until: str | None, action: str | None, format: str, **options
    ):
        queryset = export.events(
            since=_time(since, "--since"), until=_time(until, "--until"), action_id=action
        )
        try:
            for chunk in (export.jsonl if format == "jsonl" else export.csv_rows)(queryset):
                self.stdout.write(chunk, ending="")
        except DatabaseError as exc:  # the table is gone or unreadable: one line, not a traceback
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CommandError(
                f"the audit log cannot be read ({reason}). Restore the database from a backup "
                "(docs/operations.md, Restore); `impri audit verify` says what else is wrong"
            ) from None

    def _checkpoint(self, file: str, **options):
        checkpoint = log.make_checkpoint()
        if checkpoint is None:
            raise CommandError("the audit log is empty: nothing to checkpoint")
        with Path(file).open("a") as fh:
            fh.write(json.dumps(checkpoint, sort_keys=True) + "\n")
        self.stdout.write(
            f"Checkpoint at #{checkpoint['seq']} ({checkpoint['hash'][:12]}…) appended to {file}"
        )


def _time(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    parsed = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"{flag} must be an ISO 8601 time such as 2026-12-01T00:00:00Z")
    return parsed


CHECKPOINT_SHAPE = "a JSON object {seq, hash, at, signature} as `impri audit checkpoint` writes"


def _read_checkpoints(path: str) -> list[tuple[int, dict]]:
    """The file's checkpoints; a line that is not one is named, by number, before anything runs."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read checkpoints from {path}: {exc}") from None
    pins = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            pin = json.loads(line)
        except ValueError as exc:
            raise CommandError(f"{path}, line {number}: not JSON ({exc})") from None
        if not _is_checkpoint(pin):
            raise CommandError(
                f"{path}, line {number}: not a checkpoint: expected {CHECKPOINT_SHAPE}"
            )
        pins.append((number, pin))
    return pins


def _is_checkpoint(pin) -> bool:
    return (
        isinstance(pin, dict)
        and isinstance(pin.get("seq"), int)
        and not isinstance(pin["seq"], bool)
        and all(isinstance(pin.get(k), str) for k in ("hash", "at", "signature"))
    )
