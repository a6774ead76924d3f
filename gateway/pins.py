"""Pinned tool definitions: what an operator accepted is all an agent sees and all the upstream gets.

A definition is the part of a tool an agent (and its model) reads and a call is
built from: name, title, description, input and output schema, annotations.
Its SHA-256 is over the canonical JSON (``audit.canonical``), so key order and
number spelling never make a change.

- The first time an operator command reaches the upstream (``impri gateway
  import`` of a new gateway, or ``impri gateway refresh NAME``) every tool it
  offers is pinned (``gateway.tools_pinned``).
- From then on every listing and every call compares what the upstream offers
  with the pins (:func:`observe`). A tool whose definition differs, or a new
  tool under a policy other than ``deny``, is *held*: recorded once per change
  (``gateway.tool_changed`` with both hashes and a diff), counted on
  ``/metrics``, refused when called, until an operator accepts it
  (:func:`accept`, ``gateway.tool_accepted``): a new tool only when named.
- What an operator reviews shows every character (``gateway/characters.py``):
  the diff escapes what a reader cannot see, and a held change is flagged for
  unclear characters and for a name that looks like a pinned tool's (:func:`warnings`).

Nothing here talks to the upstream: callers hand in what it offered.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from audit import log as audit
from audit.models import ActorType, canonical_json

from . import characters, services
from .models import PinnedTool, Policy, Upstream

DEFINITION_KEYS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
DIFF_LIMIT = 20000


class NothingToAccept(ValueError):
    """Named tools with no change waiting; the message names them."""


def definition(tool: dict) -> dict:
    """The pinned part of a tool as the upstream listed it (``Tool.model_dump(by_alias=True)``)."""
    return {key: tool[key] for key in DEFINITION_KEYS if tool.get(key) is not None}


def sha256_of(tool_definition: dict) -> str:
    return hashlib.sha256(canonical_json(definition(tool_definition))).hexdigest()


def diff(old: dict | None, new: dict | None) -> str:
    """A unified diff of two definitions as indented JSON, for people (bounded).

    Every character shows: one a reader cannot see, or would take for another,
    is written as ``\\u{XXXX}`` (``gateway/characters.py``), so two lines that
    differ look different.
    """

    def lines(value):
        if value is None:
            return []
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
        return characters.escaped(text, backslash=False).splitlines()

    text = "\n".join(
        difflib.unified_diff(lines(old), lines(new), "pinned", "upstream now", lineterm="")
    )
    return text if len(text) <= DIFF_LIMIT else text[:DIFF_LIMIT] + "\n… (diff cut)"


@dataclass
class ToolState:
    """One tool as the gateway sees it now."""

    name: str
    verdict: str  # allow | review | deny (the effective policy)
    state: str  # pinned | changed | new | hidden | not offered | not recorded
    pin: PinnedTool | None
    kind: str
    # A held change's warnings: the pinned tool a new name looks like, unclear characters.
    looks_like: str | None = None
    unclear: list[str] = field(default_factory=list)

    @property
    def listed(self) -> dict | None:
        """The definition an agent is shown (the pinned one), or None when it is not listed."""
        if self.verdict == Policy.DENY or self.pin is None or not self.pin.sha256:
            return None
        if self.state in ("not offered", "not recorded"):
            return None
        return self.pin.definition


def observe(name: str, offered: list[dict] | None) -> list[ToolState]:
    """Compare what the upstream ``offered`` (None: not reachable) with the pins; hold changes.

    Each change is recorded once: a second listing that finds the same new
    definition records nothing (the conditional UPDATE on ``pending_sha256``
    decides between concurrent listings).
    """
    upstream = services.load(name)
    explicit = services.policies(upstream)
    pins = {p.tool: p for p in PinnedTool.objects.filter(upstream=upstream)}
    states: list[ToolState] = []
    seen: set[str] = set()
    for tool in offered if offered is not None else []:
        tool_name = tool.get("name")
        if not isinstance(tool_name, str) or tool_name in seen:
            continue
        seen.add(tool_name)
        verdict = services.effective(upstream, tool_name, explicit)
        pin = pins.get(tool_name)
        if upstream.pinned_at is None:
            state = "not recorded"
        elif verdict == Policy.DENY:
            state = "hidden"
        else:
            pin = _compare(upstream, tool_name, pin, tool)
            state = "pinned" if not pin.held else ("changed" if pin.sha256 else "new")
        states.append(_state(upstream, tool_name, verdict, state, pin))
    for tool_name, pin in pins.items():
        if tool_name in seen:
            continue
        verdict = services.effective(upstream, tool_name, explicit)
        if offered is None:  # the upstream is away: the pins as they stand
            state = "pinned" if not pin.held else ("changed" if pin.sha256 else "new")
        elif not pin.sha256:  # a new tool that went away before anyone accepted it
            PinnedTool.objects.filter(pk=pin.pk, sha256="").delete()
            continue
        else:
            state = "not offered"
        states.append(_state(upstream, tool_name, verdict, state, pin))
    accepted = {tool for tool, pin in pins.items() if pin.sha256}
    for state in states:
        if state.pin is not None and state.pin.held:
            state.looks_like, state.unclear = warnings(state.pin, accepted)
    return sorted(states, key=lambda s: s.name)


def warnings(pin: PinnedTool, accepted: set[str] | None = None) -> tuple[str | None, list[str]]:
    """A held change's warnings: the accepted tool a new one's name looks like, and the kinds
    of unclear characters its text holds (``gateway/characters.py``)."""
    if accepted is None:
        accepted = set(
            PinnedTool.objects.filter(upstream_id=pin.upstream_id)
            .exclude(sha256="")
            .values_list("tool", flat=True)
        )
    like = None if pin.sha256 else characters.looks_like(pin.tool, accepted)
    text = pin.tool + "\n" + characters.texts_of(pin.pending_definition)
    return like, characters.unclear_kinds(text)


def _state(upstream: Upstream, tool: str, verdict: str, state: str, pin) -> ToolState:
    return ToolState(tool, verdict, state, pin, services.kind_for(upstream.name, tool))


def _compare(upstream: Upstream, tool: str, pin: PinnedTool | None, offered: dict) -> PinnedTool:
    """The tool's pin after comparing it with ``offered`` (held when they differ)."""
    now_definition = definition(offered)
    now_sha = sha256_of(now_definition)
    if pin is not None and pin.sha256 == now_sha:
        if pin.pending_sha256:  # back to what was accepted: nothing is held any more
            PinnedTool.objects.filter(pk=pin.pk, pending_sha256=pin.pending_sha256).update(
                pending_definition=None, pending_sha256="", pending_since=None
            )
            pin.pending_definition, pin.pending_sha256, pin.pending_since = None, "", None
        return pin
    if pin is not None and pin.pending_sha256 == now_sha:
        return pin  # already held and recorded
    with transaction.atomic():
        if pin is None:
            pin, _ = PinnedTool.objects.get_or_create(upstream=upstream, tool=tool)
        won = (
            PinnedTool.objects.filter(pk=pin.pk)
            .exclude(pending_sha256=now_sha)
            .exclude(sha256=now_sha)
            .update(
                pending_definition=now_definition,
                pending_sha256=now_sha,
                pending_since=timezone.now(),
            )
        )
        if won:
            audit.record(
                "gateway.tool_changed",
                actor_type=ActorType.SYSTEM,
                actor_id=f"gateway:{upstream.name}",
                data={
                    "gateway": upstream.name,
                    "tool": tool,
                    "old_sha256": pin.sha256 or None,
                    "new_sha256": now_sha,
                    "diff": diff(pin.definition, now_definition),
                },
            )
    pin.refresh_from_db()
    return pin


def pin_all(name: str, offered: list[dict], *, by: str) -> list[str] | None:
    """The first contact an operator asked for: pin every tool ``offered``; None if pinned before."""
    with transaction.atomic():
        won = Upstream.objects.filter(name=name, pinned_at__isnull=True).update(
            pinned_at=timezone.now()
        )
        if not won:
            return None
        upstream = Upstream.objects.get(name=name)
        hashes = {}
        for tool in offered:
            tool_name = tool.get("name")
            if not isinstance(tool_name, str) or tool_name in hashes:
                continue
            pinned = definition(tool)
            hashes[tool_name] = sha256_of(pinned)
            PinnedTool.objects.update_or_create(
                upstream=upstream,
                tool=tool_name,
                defaults={
                    "definition": pinned,
                    "sha256": hashes[tool_name],
                    "pinned_at": upstream.pinned_at,
                    "pinned_by": by,
                    "pending_definition": None,
                    "pending_sha256": "",
                    "pending_since": None,
                },
            )
        audit.record(
            "gateway.tools_pinned",
            actor_type=ActorType.SYSTEM,
            actor_id=by,
            data={"gateway": name, "tools": hashes},
        )
    return sorted(hashes)


def pending(name: str) -> list[PinnedTool]:
    return list(
        PinnedTool.objects.filter(upstream__name=name).exclude(pending_sha256="").order_by("tool")
    )


def accept(
    name: str,
    tools: list[str] | None = None,
    *,
    by: str,
    actor_type: str = ActorType.SYSTEM,
    actor_ref: str = "",
    expect_sha256: str | None = None,
) -> list[dict]:
    """Pin the held definitions of gateway ``name``; returns what was accepted.

    Without ``tools``, only the changed definitions of tools already pinned: a
    new tool is accepted only when named. A name may be given as printed
    (``refund\\u{200B}``). ``expect_sha256`` (admin) accepts only the
    definition the operator was shown: a change that arrived since is left held.
    """
    waiting = {p.tool: p for p in pending(name)}
    if not tools:
        held = {tool: pin for tool, pin in waiting.items() if pin.sha256}
    else:
        printed = {characters.shown_name(t).strip("`"): t for t in waiting}
        named = {tool: tool if tool in waiting else printed.get(tool) for tool in tools}
        missing = [tool for tool, found in named.items() if found is None]
        if missing:
            raise NothingToAccept(
                f"gateway {name!r} has no change waiting for "
                f"{', '.join(characters.shown_name(t) for t in missing)}"
                + (
                    f" (waiting: {', '.join(map(characters.shown_name, waiting))})"
                    if waiting
                    else ""
                )
            )
        held = {found: waiting[found] for found in named.values()}
    accepted = []
    now = timezone.now()
    with transaction.atomic():
        for tool, pin in held.items():
            if expect_sha256 is not None and pin.pending_sha256 != expect_sha256:
                raise NothingToAccept(
                    f"{name}.{characters.shown_name(tool)} changed again since it was shown: "
                    "review it anew"
                )
            won = PinnedTool.objects.filter(pk=pin.pk, pending_sha256=pin.pending_sha256).update(
                definition=pin.pending_definition,
                sha256=pin.pending_sha256,
                pinned_at=now,
                pinned_by=by,
                pending_definition=None,
                pending_sha256="",
                pending_since=None,
            )
            if not won:
                continue  # accepted by someone else meanwhile
            entry = {
                "gateway": name,
                "tool": tool,
                "old_sha256": pin.sha256 or None,
                "sha256": pin.pending_sha256,
            }
            audit.record(
                "gateway.tool_accepted",
                actor_type=actor_type,
                actor_id=by,
                actor_ref=actor_ref,
                data=entry,
            )
            accepted.append(entry)
    return accepted


def pin_for(name: str, tool: str) -> PinnedTool | None:
    return PinnedTool.objects.filter(upstream__name=name, tool=tool).first()


def held_counts() -> dict[str, int]:
    """Held changes per enabled gateway (``/metrics``, the admin index)."""
    counts = {u.name: 0 for u in Upstream.objects.filter(enabled=True)}
    for name in PinnedTool.objects.exclude(pending_sha256="").values_list(
        "upstream__name", flat=True
    ):
        if name in counts:
            counts[name] += 1
    return counts
