"""Agent keys and reviewer tokens: created, shown once, stored hashed, revocable."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ValidationError
from django.core.validators import slug_re
from django.db import transaction
from django.utils import timezone

from approvals.errors import RateLimited
from approvals.models import Agent, ApiKey, hash_key, random_base62
from audit import identity
from audit import log as audit
from audit.identity import current_actor
from audit.models import ActorType
from compat.django import columns, prepared_cursor
from plumbing import fallbacks

SECRET_CHARS = 40  # about 238 bits
PREFIX_CHARS = 6
LAST_USED_RESOLUTION = timedelta(seconds=60)
# The rate limiter's counts while the shared cache (Redis) cannot be reached: this process's.
_LOCAL_COUNTS = LocMemCache("impri-rate-limit", {"OPTIONS": {"MAX_ENTRIES": 10_000}})
AGENT_NAME_MAX = 100  # Agent.name's max_length


@dataclass(frozen=True)
class Principal:
    """Who is calling: exactly one of ``agent`` and ``user`` is set."""

    key: ApiKey
    agent: Agent | None = None
    user: object | None = None


def _new_key(
    kind: str,
    *,
    agent: Agent | None = None,
    user=None,
    label: str = "",
    by: str = "system",
    is_service: bool = False,
) -> tuple[ApiKey, str]:
    raw = ApiKey.PREFIXES[kind] + random_base62(SECRET_CHARS)
    with transaction.atomic():
        key = ApiKey.objects.create(
            kind=kind,
            agent=agent,
            user=user,
            prefix=raw[: len(ApiKey.PREFIXES[kind]) + PREFIX_CHARS],
            key_hash=hash_key(raw),
            label=label,
            is_service=is_service,
        )
        audit.record(
            "key.created",
            actor_type=ActorType.SYSTEM,
            actor_id=by,
            actor_ref=current_actor()["actor_ref"],
            data={
                "kind": kind,
                "prefix": key.prefix,
                **({"service": True} if is_service else {}),
                "owner": agent.name if agent else user.get_username(),
                "owner_ref": f"agent:{agent.pk}" if agent else f"user:{user.pk}",
            },
        )
    return key, raw


def check_agent_name(name: str) -> None:
    """An agent's name is a slug (``support-bot``) of at most 100 characters: ValidationError if not.

    It is printed in the inbox, the audit log, ``impri agents`` and every CLI message:
    no spaces, no control characters, nothing to quote.
    """
    if not name:
        raise ValidationError("is required: letters, digits, '-' and '_' (e.g. support-bot)")
    if len(name) > AGENT_NAME_MAX:
        raise ValidationError(f"is {len(name)} characters long: at most {AGENT_NAME_MAX}")
    if not slug_re.fullmatch(name):
        raise ValidationError(
            f"{name!r} is not a slug: use only letters, digits, '-' and '_' (e.g. support-bot)"
        )


def create_agent(name: str, *, description: str = "") -> tuple[Agent, str]:
    """Create an agent and its first key; returns the agent and the raw key (shown once).

    ValidationError for a name ``check_agent_name`` refuses.
    """
    check_agent_name(name)
    with transaction.atomic():
        agent = Agent.objects.create(name=name, description=description)
        _, raw = create_agent_key(agent)
    return agent, raw


def create_agent_key(agent: Agent, *, label: str = "", by: str = "system") -> tuple[ApiKey, str]:
    return _new_key(ApiKey.Kind.AGENT, agent=agent, label=label, by=by)


def rotate_agent_key(agent: Agent, *, by: str = "system") -> tuple[ApiKey, str]:
    """A new key for ``agent``, and every key it had revoked: one transaction."""
    with transaction.atomic():
        old = list(agent.keys.active())
        key, raw = create_agent_key(agent, by=by)
        for stale in old:
            revoke_key(stale, by=by)
    return key, raw


def create_reviewer_token(
    user, *, label: str = "", by: str = "system", is_service: bool = False
) -> tuple[ApiKey, str]:
    """A reviewer token; ``is_service`` marks one used by a program (see approvals.stepup)."""
    return _new_key(ApiKey.Kind.REVIEWER, user=user, label=label, by=by, is_service=is_service)


def revoke_key(key: ApiKey, *, by: str = "system") -> None:
    with transaction.atomic():
        if ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        ):
            audit.record(
                "key.revoked",
                actor_type=ActorType.SYSTEM,
                actor_id=by,
                actor_ref=current_actor()["actor_ref"],
                data={"kind": key.kind, "prefix": key.prefix},
            )


def rotate_webhook_secret(agent: Agent, *, by: str = "system") -> str:
    """Give the agent a new webhook signing secret; returns it (shown once, never again)."""
    from approvals.models import new_webhook_secret

    secret = new_webhook_secret()
    with transaction.atomic():
        Agent.objects.filter(pk=agent.pk).update(webhook_secret=secret)
        agent.webhook_secret = secret
        actor = identity.current_actor()  # the admin who pressed the button, with a stable ref
        if not actor["actor_ref"]:
            actor["actor_id"] = by
        audit.record(
            "agent.webhook_secret_rotated",
            **actor,
            data={"agent": agent.name, "agent_ref": identity.agent_ref(agent)},  # never the secret
        )
    return secret


def authenticate(raw: str) -> Principal | None:
    """Return the caller for a raw key, or None when it is unknown, revoked or disabled."""
    if not raw or len(raw) > 100:
        return None
    key = _active_key(hash_key(raw))
    if key is None:
        return None
    if key.kind == ApiKey.Kind.AGENT and not key.agent.is_active:
        return None
    if key.kind == ApiKey.Kind.REVIEWER and not key.user.is_active:
        return None
    _check_rate(key)
    _touch(key)
    if key.kind == ApiKey.Kind.AGENT:
        return Principal(key=key, agent=key.agent)
    return Principal(key=key, user=key.user)


def _active_key(key_hash: str) -> ApiKey | None:
    """The unrevoked key with this hash, its agent or user loaded: one plain SQL statement.

    Kept as SQL because it measured: every API call and MCP session runs it, and its
    ORM twin, ``ApiKey.objects.active().select_related("agent", "user")``, cost 14-19 %
    of a push's CPU (docs/benchmarks.md, "Hand-written SQL and the ORM").
    tests/core/test_hand_sql.py runs both on the same keys; ``compat.django.columns`` turns the
    row into instances with the backend's converters, as the ORM would.
    """
    connection = transaction.get_connection()
    quote = connection.ops.quote_name
    User = get_user_model()
    key_cols = columns(ApiKey, "k", connection.alias)
    agent_cols = columns(Agent, "a", connection.alias)
    user_cols = columns(User, "u", connection.alias)
    with prepared_cursor(connection) as cursor:
        cursor.execute(
            f"SELECT {key_cols.sql}, {agent_cols.sql}, {user_cols.sql}"
            f" FROM {quote(ApiKey._meta.db_table)} k"
            f" LEFT JOIN {quote(Agent._meta.db_table)} a"
            f" ON a.{quote(Agent._meta.pk.column)} = k.{quote('agent_id')}"
            f" LEFT JOIN {quote(User._meta.db_table)} u"
            f" ON u.{quote(User._meta.pk.column)} = k.{quote('user_id')}"
            f" WHERE k.{quote('key_hash')} = %s AND k.{quote('revoked_at')} IS NULL",
            [key_hash],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    key = key_cols.instance(row[: len(key_cols)])
    if key.agent_id is not None:
        key.agent = agent_cols.instance(row[len(key_cols) : len(key_cols) + len(agent_cols)])
    if key.user_id is not None:
        key.user = user_cols.instance(row[len(key_cols) + len(agent_cols) :])
    return key


def _touch(key: ApiKey) -> None:
    # One write a minute per key, not one per request.
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)


def _check_rate(key: ApiKey) -> None:
    limit = settings.IMPRI_RATE_LIMIT_PER_MIN
    if not limit:
        return
    now = time.time()
    window = int(now // 60)
    bucket = f"rate:{key.key_hash[:24]}:{window}"
    try:
        count = _count(cache, bucket)
    except Exception as exc:
        # The shared cache (Redis) is away: count in this process instead of refusing every
        # call (a 503 for every agent) or allowing every one. Each process then allows up to
        # the limit, so N replicas allow N times it (docs/operations.md, "When Redis is down").
        fallbacks.note("cache", "the rate limiter counts in this process only", exc)
        count = _count(_LOCAL_COUNTS, bucket)
    if count > limit:
        raise RateLimited(
            f"more than {limit} requests a minute with key {key.prefix}…; slow down",
            retry_after=60 - int(now % 60),
        )


def _count(counts, bucket: str) -> int:
    counts.add(bucket, 0, timeout=120)
    try:
        return counts.incr(bucket)
    except ValueError:  # evicted between add and incr
        counts.set(bucket, 1, timeout=120)
        return 1
