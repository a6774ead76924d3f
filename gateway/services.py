"""The gateway's database side: policies, gated calls and their audit events (sync, run on dbexec).

A gated call is an ordinary action pushed through ``approvals.services.push_action``;
this module only adds what the gateway needs around it: which action an
identical repeat attaches to, the single claim on calling the upstream, and
the audit events of pass-through calls and upstream calls.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import re

from django.db import transaction
from django.utils import timezone

from approvals import services as approvals
from approvals.errors import IdempotencyConflict, ImpriError
from approvals.models import Action, ActionStatus, Agent
from approvals.schemas import ActionIn, resolve_path
from audit import log as audit
from audit.models import ActorType, canonical_json
from rules import services as rule_services

from .models import GatedCall, Policy, ToolPolicy, Upstream, money_entry

# The gateway's idempotency keys: a reserved prefix (approvals.schemas.inputs.RESERVED_KEY_PREFIXES)
# no agent may write; what a key finds still counts only with its GatedCall (_ours).
KEY_PREFIX = "mcp-gateway:"
# An identical repeat attaches only to an action in one of these states (see begin).
OPEN = (ActionStatus.PENDING, ActionStatus.APPROVED)
TITLE_FIELD_RE = re.compile(r"\{([A-Za-z0-9_.-]+)\}")


class GatewayNotFound(ImpriError):
    status_code = 404
    code = "not_found"

    def __init__(self, name: str):
        super().__init__(f"no enabled gateway named {name!r}", field="gateway")


def load(name: str) -> Upstream:
    upstream = Upstream.objects.filter(name=name, enabled=True).first()
    if upstream is None:
        raise GatewayNotFound(name)
    return upstream


def exists(name: str) -> bool:
    return Upstream.objects.filter(name=name, enabled=True).exists()


def kind_for(gateway: str, tool: str) -> str:
    """``mcp.<gateway>.<tool>``: the names lowercased and otherwise as they are.

    A character outside ``[a-z0-9_.-]`` becomes ``_``, and so does a dot that
    would leave an empty segment, so ``get-sum`` stays ``get-sum`` and a rule
    written with the tool's own name matches.
    """

    def clean(text: str) -> str:
        text = re.sub(r"[^a-z0-9_.-]", "_", text.lower())
        return re.sub(r"^\.|\.(?=\.|$)", "_", text) or "_"

    kind = f"mcp.{clean(gateway)}.{clean(tool)}"[:100]
    return kind[:-1] + "_" if kind.endswith(".") else kind


def policy_for(upstream: Upstream, tool: str) -> ToolPolicy:
    """The tool's own policy, or an unsaved one carrying the gateway's default."""
    found = ToolPolicy.objects.filter(upstream=upstream, tool=tool).first()
    return found or ToolPolicy(upstream=upstream, tool=tool, policy=upstream.default_policy)


def policies(upstream: Upstream) -> dict[str, ToolPolicy]:
    return {p.tool: p for p in ToolPolicy.objects.filter(upstream=upstream)}


def effective(upstream: Upstream, tool: str, explicit: dict[str, ToolPolicy] | None = None) -> str:
    """allow, review or deny: an allowed tool whose kind a rule names explicitly is reviewed."""
    policy = (explicit or {}).get(tool) if explicit is not None else policy_for(upstream, tool)
    value = policy.policy if policy else upstream.default_policy
    if value == Policy.ALLOW and _named_by_a_rule(kind_for(upstream.name, tool)):
        return Policy.REVIEW
    return value


def _named_by_a_rule(kind: str) -> bool:
    """A rule whose kind pattern (other than the catch-all ``*``) matches: the rules decide."""
    return any(
        rule.enabled and rule.kind != "*" and fnmatch.fnmatchcase(kind, rule.kind)
        for rule in rule_services.current_rules().rules
    )


def arguments_sha256(arguments: dict) -> str:
    return hashlib.sha256(canonical_json(arguments)).hexdigest()


def title_for(policy: ToolPolicy, gateway: str, tool: str, arguments: dict) -> str:
    """The policy's template with ``{argument}`` fields filled in; a missing field stays as written."""
    template = policy.title or f"{tool} via {gateway}"

    def fill(match) -> str:
        found, value = resolve_path({"payload": arguments}, "payload." + match.group(1))
        if not found or isinstance(value, dict | list):
            return match.group(0)
        return str(value)

    title = " ".join(TITLE_FIELD_RE.sub(fill, template).split())
    return title[:200] or tool


def begin(
    agent: Agent, upstream: Upstream, tool: str, arguments: dict, *, definition_sha256: str = ""
) -> Action:
    """The action for this call: the open one an identical call made, else a new one.

    An identical call attaches to its predecessor only while that action is
    open: pending, or approved and not yet executed (the agent was told to call
    again, and the repeat is what carries out the approval). Once it has
    settled (rejected, expired, cancelled, executed or failed) or its outcome
    was handed back, the next identical call is a new action; a new action
    that follows a rejection names it in its context, so the reviewer sees the
    repeat and the agent's answer says what happened to the first one.

    Only an action the gateway itself created for this gateway, tool and
    argument digest counts (its ``GatedCall``, written in the push's
    transaction; see :func:`_ours`): the idempotency key, which an agent can
    compute, only makes concurrent identical calls share one action (the
    database's unique key decides), and agents cannot write keys under
    ``mcp-gateway:`` (``approvals.schemas.inputs.RESERVED_KEY_PREFIXES``).
    ``definition_sha256`` is the pinned definition the call was made against:
    the upstream is called after approval only if it still offers it.
    """
    digest = call_digest(upstream.name, tool, arguments)
    for _ in range(3):  # another identical call may take the key between the read and the push
        index, existing, previous = _attached(agent, upstream, tool, digest)
        if existing is None:
            existing = _push(
                agent, upstream, tool, arguments, digest, index, previous, definition_sha256
            )
        if existing is not None:
            return approvals.get_action_for_agent(existing.pk, agent)
    raise IdempotencyConflict(f"identical calls of {tool} keep racing; call it again")


def call_digest(gateway: str, tool: str, arguments: dict) -> str:
    """What identifies a call: SHA-256 of the canonical JSON of gateway, tool and arguments."""
    return arguments_sha256({"gateway": gateway, "tool": tool, "arguments": arguments})


def _key(digest: str, index: int) -> str:
    return f"{KEY_PREFIX}{digest}:{index}"


def _push(agent, upstream, tool, arguments, digest, index, previous, definition_sha256):
    """Push the call's action under key ``index`` with its ``GatedCall``, in one transaction.

    None when another identical call took the key first: the caller reads again.
    """
    policy = policy_for(upstream, tool)
    data = ActionIn.model_validate(
        {
            "kind": kind_for(upstream.name, tool),
            "title": title_for(policy, upstream.name, tool, arguments),
            "preview": {"format": "json", "body": _preview(upstream.name, tool, arguments)},
            "payload": arguments,
            "editable": _editable(policy, arguments),
            "context": _context(upstream, tool, previous, definition_sha256),
        }
    )
    # The key is set after validation: ActionIn refuses a reserved key from anyone.
    data = data.model_copy(update={"idempotency_key": _key(digest, index)})
    try:
        with transaction.atomic():
            action, created = approvals.push_action(agent, data, money=_money(policy))
            if not created:
                return None
            GatedCall.objects.create(
                action=action,
                agent=agent,
                gateway=upstream.name,
                tool=tool,
                arguments_sha256=digest,
                definition_sha256=definition_sha256,
            )
    except IdempotencyConflict:  # the policy changed between two identical calls
        return None
    return action


def _attached(agent: Agent, upstream: Upstream, tool: str, digest: str):
    """``(the key's index, the open action an identical call attaches to or None, the settled one before)``.

    Keys are tried from the number of identical calls already answered; an
    action under a key that is not the gateway's own for this call (one an
    agent planted before keys under ``mcp-gateway:`` were refused) is passed
    over, never attached to.
    """
    index = GatedCall.objects.filter(
        agent=agent, arguments_sha256=digest, delivered_at__isnull=False
    ).count()
    previous = None
    while True:
        found = (
            Action.objects.filter(agent=agent, idempotency_key=_key(digest, index))
            .select_related("gated_call")
            .first()
        )
        if found is None:
            return index, None, previous
        if _ours(found, agent, upstream.name, tool, digest):
            if found.effective_status in OPEN:
                return index, found, previous
            delivered(found.pk)  # settled: nobody attaches to it any more
            previous = found
        index += 1


def _ours(action: Action, agent: Agent, gateway: str, tool: str, digest: str) -> bool:
    """The gateway made ``action`` for this very call: its GatedCall, kind and pushed arguments agree."""
    try:
        call = action.gated_call
    except GatedCall.DoesNotExist:
        return False
    return (
        call.agent_id == agent.pk
        and call.gateway == gateway
        and call.tool == tool
        and call.arguments_sha256 == digest
        and action.kind == kind_for(gateway, tool)
        and call_digest(gateway, tool, action.original_payload) == digest
    )


def approved_for(agent: Agent, upstream: Upstream, tool: str, arguments: dict) -> Action | None:
    """The approved, not yet executed action an identical call would carry out, if any."""
    existing = _attached(agent, upstream, tool, call_digest(upstream.name, tool, arguments))[1]
    if existing is None or existing.effective_status != ActionStatus.APPROVED:
        return None
    return approvals.get_action_for_agent(existing.pk, agent)


def payload_problem(
    action_id: str, agent: Agent, gateway: str, tool: str, arguments: dict, sending: dict
) -> str:
    """Why the approved payload is not this call's arguments with the reviewer's edits, or "".

    Checked just before the upstream is called with ``sending``: the action must be the
    gateway's own for this agent, gateway, tool and arguments, and its payload
    the pushed arguments with only editable paths changed, each to a value of
    the same type within its bounds (``approvals.apply_edits``,
    the check a reviewer's edit passed).
    """
    made = Action.objects.select_related("gated_call").filter(pk=action_id).first()
    digest = call_digest(gateway, tool, arguments)
    if made is None or not _ours(made, agent, gateway, tool, digest):
        return "the action is not the one the gateway made for this call"
    edits: dict = {}
    if not _leaf_edits(made.original_payload, made.payload, "payload", edits):
        return "the approved payload differs from the call's arguments beyond single values"
    pushed = copy.copy(made)  # the edits applied to what the agent's call carried
    pushed.payload = copy.deepcopy(made.original_payload)
    try:
        edited = approvals.apply_edits(pushed, edits)
    except ImpriError as exc:
        return str(exc)
    if canonical_json(edited) != canonical_json(made.payload) or canonical_json(
        sending
    ) != canonical_json(made.payload):
        return "the approved payload is not the call's arguments with the reviewer's edits"
    return ""


def _leaf_edits(original, now, path: str, edits: dict) -> bool:
    """Collect ``{path: value}`` for each scalar that differs; False if the shapes differ."""
    if isinstance(original, dict) and isinstance(now, dict):
        if set(original) != set(now):
            return False
        return all(_leaf_edits(original[k], now[k], f"{path}.{k}", edits) for k in original)
    if isinstance(original, list) and isinstance(now, list):
        if len(original) != len(now):
            return False
        return all(
            _leaf_edits(a, b, f"{path}.{i}", edits)
            for i, (a, b) in enumerate(zip(original, now, strict=True))
        )
    if isinstance(original, dict | list) or isinstance(now, dict | list):
        return False
    if canonical_json(original) != canonical_json(now):
        edits[path] = now
    return True


def refuse_mismatch(action: Action, gateway: str, problem: str) -> None:
    """Audit a gated call refused because its approved payload is not the call's (no upstream call)."""
    with transaction.atomic():
        audit.record(
            "gateway.payload_mismatch",
            actor_type=ActorType.SYSTEM,
            actor_id=f"gateway:{gateway}",
            action_id=action.pk,
            data={"problem": problem, "payload_sha256": approvals.payload_sha256(action.payload)},
        )


def _context(
    upstream: Upstream, tool: str, previous: Action | None, definition_sha256: str
) -> dict:
    context = {"gateway": upstream.name, "tool": tool, "upstream": upstream.target}
    if definition_sha256:
        context["tool_sha256"] = definition_sha256
    if previous is not None:
        context["repeat_of"] = {
            "action_id": previous.pk,
            "status": previous.effective_status,
            "note": previous.note,
            "reject_reason": previous.reject_reason,
        }
    return context


def _preview(gateway: str, tool: str, arguments: dict) -> str:
    call = {"gateway": gateway, "tool": tool, "arguments": arguments}
    return json.dumps(call, indent=2, sort_keys=True, ensure_ascii=False)


def _editable(policy: ToolPolicy, arguments: dict) -> list[str]:
    """``payload.<path>`` for each editable argument the call actually carries as a scalar."""
    paths = []
    for path in policy.editable:
        found, value = resolve_path({"payload": arguments}, "payload." + path)
        if found and value is not None and not isinstance(value, dict | list):
            paths.append("payload." + path)
    return paths


def _money(policy: ToolPolicy) -> list[dict] | None:
    """The tool's money declaration as ``push_action`` takes it: paths into ``payload.``.

    None when the tool declares none (the rules file's ``kinds:`` may, else the kind is
    undeclared); ``[]`` when it declares that it moves no money, which then flows as declared.
    """
    if policy.money is None:
        return None
    return [money_entry(entry) for entry in policy.money]


def claim(action: Action) -> bool:
    """Take the one right to call the upstream for this approved action; False if taken.

    The claim is not the call: :func:`called` records the call when it is
    made, after the upstream's definition was checked against the approved one.
    """
    won = GatedCall.objects.filter(action=action, upstream_called_at__isnull=True).update(
        upstream_called_at=timezone.now()
    )
    return bool(won)


def called(action: Action, grant_jti: str, definition_sha256: str) -> None:
    """Audit the one upstream call of an approved action, just before it is made."""
    with transaction.atomic():
        audit.record(
            "gateway.upstream_called",
            actor_type=ActorType.SYSTEM,
            actor_id=f"gateway:{action.gated_call.gateway}",
            action_id=action.pk,
            data={
                "tool": action.gated_call.tool,
                "payload_sha256": approvals.payload_sha256(action.payload),
                "grant_jti": grant_jti,
                "tool_sha256": definition_sha256,
            },
        )


def definition_of(action_id: str) -> str:
    """The pinned definition's hash a gated call was made (and approved) against."""
    return (
        GatedCall.objects.filter(action_id=action_id)
        .values_list("definition_sha256", flat=True)
        .first()
        or ""
    )


def delivered(action_id: str) -> None:
    GatedCall.objects.filter(action_id=action_id, delivered_at__isnull=True).update(
        delivered_at=timezone.now()
    )


def record_pass(
    agent: Agent, gateway: str, tool: str, arguments: dict, *, redact: bool, error: str = ""
) -> None:
    """Audit a pass-through call: the arguments' hash always, the arguments unless redacted."""
    data = {
        "gateway": gateway,
        "tool": tool,
        "policy": Policy.ALLOW.value,
        "arguments_sha256": arguments_sha256(arguments),
        "outcome": "error" if error else "ok",
    }
    if not redact:
        data["arguments"] = arguments
    if error:
        data["error"] = error[:2000]
    with transaction.atomic():
        audit.record("gateway.called", actor_type=ActorType.AGENT, actor_id=agent.name, data=data)


def record_state(name: str, error: str = "", tools: list[dict] | None = None) -> None:
    """Remember whether the upstream answered (for /readyz), and what it offered."""
    fields = {"last_error": error[:2000], "last_checked_at": timezone.now()}
    if tools is not None:
        fields.update(tools_cache=tools, tools_refreshed_at=fields["last_checked_at"])
    Upstream.objects.filter(name=name).update(**fields)


def states() -> dict:
    """Each enabled gateway's last known reachability, for /readyz."""
    out = {}
    for upstream in Upstream.objects.filter(enabled=True):
        if upstream.last_checked_at is None:
            status = "unknown"
        else:
            status = "unreachable" if upstream.last_error else "ok"
        entry = {"status": status}
        if upstream.last_error:
            entry["error"] = upstream.last_error
        out[upstream.name] = entry
    return out
