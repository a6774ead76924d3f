"""Reading the log for auditors: filters shared by the API and `impri audit export`."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime

from .models import AuditEvent, format_at

CSV_COLUMNS = [
    "seq",
    "scheme",
    "at",
    "actor_type",
    "actor_id",
    "actor_ref",
    "action_id",
    "event",
    "data",
    "prev_hash",
    "hash",
]


def events(
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    action_id: str | None = None,
    after: int = 0,
):
    qs = AuditEvent.objects.filter(seq__gt=after).order_by("seq")
    if since:
        qs = qs.filter(at__gte=since)
    if until:
        qs = qs.filter(at__lt=until)
    if action_id:
        qs = qs.filter(action_id=action_id)
    return qs


def as_dict(event: AuditEvent) -> dict:
    return {
        "seq": event.seq,
        "scheme": event.scheme,
        "at": format_at(event.at),
        "actor_type": event.actor_type,
        "actor_id": event.actor_id,
        "actor_ref": event.actor_ref,
        "action_id": event.action_id,
        "event": event.event,
        "data": event.data,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def jsonl(queryset) -> Iterator[str]:
    for event in queryset.iterator(chunk_size=2000):
        yield json.dumps(as_dict(event), sort_keys=True, ensure_ascii=False) + "\n"


def csv_rows(queryset) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for event in queryset.iterator(chunk_size=2000):
        row = as_dict(event)
        row["data"] = json.dumps(row["data"], sort_keys=True, ensure_ascii=False)
        writer.writerow([row[column] for column in CSV_COLUMNS])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()
