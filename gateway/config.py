"""Gateways as YAML: parse, import (replaces every gateway atomically), export.

```yaml
gateways:
  - name: payments
    url: https://mcp.example-psp.test/mcp        # or command: ["npx", "-y", "some-mcp-server"]
    headers: {Authorization: "Bearer ${PSP_TOKEN}"}
    default: deny                                 # allow | deny | review for tools not listed
    tools:
      create_refund:
        policy: review
        editable: [amount_cents]
        title: "Refund {amount_cents} cents"
        money: [{amount: amount_cents, currency: currency}]   # or currency: USD
      get_order:      {policy: allow}
      delete_customer: {policy: deny}
```

Running servers read the gateways from the database on every request, so an
import takes effect without a restart. Export prints ``${VAR}`` references as
written; secrets never reach the database, so they cannot be exported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction

from audit import log as audit
from audit.models import ActorType
from plumbing import strict_json, yaml_errors

from .models import Policy, ToolPolicy, Upstream, money_entry, money_problem

GATEWAY_KEYS = {"name", "url", "command", "headers", "env", "default", "enabled", "tools"}
TOOL_KEYS = {"policy", "editable", "title", "redact", "money"}
POLICIES = [p.value for p in Policy]


class ConfigError(ValueError):
    """A malformed gateway file; the message names the gateway and the bad part."""


@dataclass
class Parsed:
    upstream: Upstream
    policies: list[ToolPolicy] = field(default_factory=list)


def parse_yaml(text: str) -> list[Parsed]:
    try:
        document = strict_json.load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_errors.describe(exc, text)) from None
    if isinstance(document, dict) and set(document) == {"gateways"}:
        document = document["gateways"]
    if document is None:
        document = []
    if not isinstance(document, list):
        raise ConfigError("(file): expected `gateways:` with a list of gateways")
    parsed = [_gateway(i, spec) for i, spec in enumerate(document)]
    names = [p.upstream.name for p in parsed]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"gateway {name!r}: the name is used twice")
    return parsed


def _gateway(index: int, spec) -> Parsed:
    where = f"gateways[{index}]"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: must be a mapping")
    if isinstance(spec.get("name"), str):
        where = f"gateway {spec['name']!r}"
    unknown = sorted(set(spec) - GATEWAY_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(GATEWAY_KEYS))})"
        )
    default = spec.get("default", Policy.DENY)
    if default not in POLICIES:
        raise ConfigError(f"{where}: default must be one of {', '.join(POLICIES)}")
    enabled = spec.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"{where}: enabled must be true or false")
    upstream = Upstream(
        name=spec.get("name") if isinstance(spec.get("name"), str) else "",
        url=spec.get("url") or "",
        command=spec.get("command") or [],
        headers=spec.get("headers") or {},
        env=spec.get("env") or {},
        default_policy=default,
        enabled=enabled,
    )
    try:
        upstream.clean()
    except ValidationError as exc:
        key, messages = next(iter(exc.message_dict.items()))
        raise ConfigError(f"{where}: {key}: {messages[0]}") from None
    tools = spec.get("tools") or {}
    if not isinstance(tools, dict):
        raise ConfigError(f"{where}: tools must map tool names to {{policy: ...}}")
    policies = [_tool(where, name, tool) for name, tool in tools.items()]
    return Parsed(upstream, policies)


def _tool(where: str, name, spec) -> ToolPolicy:
    where = f"{where}: tools.{name}"
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: the tool name must be text")
    if isinstance(spec, str):
        spec = {"policy": spec}
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: must be a mapping like {{policy: review}}")
    unknown = sorted(set(spec) - TOOL_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(TOOL_KEYS))})"
        )
    if spec.get("policy") not in POLICIES:
        raise ConfigError(f"{where}: policy must be one of {', '.join(POLICIES)}")
    editable = spec.get("editable") or []
    if not isinstance(editable, list) or not all(isinstance(p, str) and p for p in editable):
        raise ConfigError(
            f"{where}: editable must be a list of argument paths, e.g. [amount_cents]"
        )
    editable = [p.removeprefix("payload.") for p in editable]
    title = spec.get("title") or ""
    if not isinstance(title, str) or len(title) > 300 or "\n" in title:
        raise ConfigError(f"{where}: title must be one line of at most 300 characters")
    redact = spec.get("redact", False)
    if not isinstance(redact, bool):
        raise ConfigError(f"{where}: redact must be true or false")
    money = spec.get("money")  # absent: not declared; []: moves no money
    problem = money_problem(money)
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return ToolPolicy(
        tool=name,
        policy=spec["policy"],
        editable=editable,
        title=title,
        redact=redact,
        money=None if money is None else [_as_written(money_entry(entry)) for entry in money],
    )


def _as_written(entry: dict) -> dict:
    """Stored (and exported) as argument paths, without ``payload.``; the defaults written out."""
    return {
        key: value.removeprefix("payload.") if isinstance(value, str) else value
        for key, value in entry.items()
    }


def replace_all(parsed: list[Parsed], *, by: str) -> None:
    """Replace every gateway with ``parsed`` in one transaction (audited)."""
    with transaction.atomic():
        ToolPolicy.objects.all().delete()
        Upstream.objects.exclude(name__in=[p.upstream.name for p in parsed]).delete()
        for item in parsed:
            fields = {
                f: getattr(item.upstream, f)
                for f in ("url", "command", "headers", "env", "default_policy", "enabled")
            }
            upstream, _ = Upstream.objects.update_or_create(
                name=item.upstream.name, defaults=fields
            )
            for policy in item.policies:
                policy.upstream = upstream
                policy.save()
        audit.record(
            "gateway.imported",
            actor_type=ActorType.SYSTEM,
            actor_id=by,
            data={"gateways": [p.upstream.name for p in parsed]},
        )


def as_spec(upstream: Upstream) -> dict:
    spec: dict = {"name": upstream.name}
    if upstream.url:
        spec["url"] = upstream.url
    else:
        spec["command"] = list(upstream.command)
    if upstream.headers:
        spec["headers"] = dict(upstream.headers)
    if upstream.env:
        spec["env"] = dict(upstream.env)
    spec["default"] = upstream.default_policy
    if not upstream.enabled:
        spec["enabled"] = False
    tools = {}
    for policy in upstream.policies.all():
        tool: dict = {"policy": policy.policy}
        if policy.editable:
            tool["editable"] = list(policy.editable)
        if policy.title:
            tool["title"] = policy.title
        if policy.redact:
            tool["redact"] = True
        if policy.money is not None:
            tool["money"] = [dict(entry) for entry in policy.money]
        tools[policy.tool] = tool
    if tools:
        spec["tools"] = tools
    return spec


def export_yaml() -> str:
    specs = [as_spec(u) for u in Upstream.objects.prefetch_related("policies")]
    return yaml.safe_dump({"gateways": specs}, sort_keys=False, allow_unicode=True)
