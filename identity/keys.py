"""Agent keys and reviewer tokens: created, shown once, stored hashed, revocable."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ValidationError
from django.core.validators import slug_re
from django.db import transaction
from django.utils import timezone

from approvals.errors import RateLimited
from approvals.models import Agent, ApiKey, hash_key, new_webhook_secret, random_base62
from audit import identity
from audit import log as audit
from audit.identity import current_actor
from audit.models import ActorType
from plumbing import fallbacks
from plumbing.generations import Generation

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
            keys_changed()
            audit.record(
                "key.revoked",
                actor_type=ActorType.SYSTEM,
                actor_id=by,
                actor_ref=current_actor()["actor_ref"],
                data={"kind": key.kind, "prefix": key.prefix},
            )


def rotate_webhook_secret(agent: Agent, *, by: str = "system") -> str:
    """Give the agent a new webhook signing secret; returns it (shown once, never again)."""
    secret = new_webhook_secret()
    with transaction.atomic():
        Agent.objects.filter(pk=agent.pk).update(webhook_secret=secret)
        keys_changed()  # a checked key carries its agent
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
    """The unrevoked key with this hash, its agent or user loaded: from this process's
    cache while the keys' generation holds, else one query."""
    generation = _GENERATION.current()
    if generation is not None:
        hit = _checked.get(key_hash)
        if hit is not None and hit.generation == generation and hit.until > time.monotonic():
            return _copy(hit.key)
    found = ApiKey.objects.active().select_related("agent", "user").filter(key_hash=key_hash)
    key = next(iter(found[:1]), None)  # the hash is unique: no ORDER BY
    if key is not None and generation is not None:  # unknown keys are not kept: no growth
        if len(_checked) >= KEY_CACHE_ENTRIES:
            _checked.clear()
        _checked[key_hash] = _Checked(generation, time.monotonic() + KEY_CACHE_S, _copy(key))
    return key


# --- The key check's cache ---------------------------------------------------------------
#
# Every API call and MCP session checks its key. A process keeps the keys it found (with
# their agent or user) by key hash, each tagged with the keys' *generation*: a random token
# in the ``keys`` cache, which every change to a key, an agent or a user replaces
# (``keys_changed``: on save and delete of the three models, and ``revoke_key``), before
# and again after its commit. An entry of another generation is read again.
#
# The ``keys`` cache is the one every process of a deployment shares: Redis in the scaled
# mode, a file in the data directory in the embedded mode (the server, the CLI and a stdio
# MCP server share it). So a revoked key is refused at once, by every process. When the
# cache cannot be read (Redis away), nothing is served from the process's cache and it is
# emptied; ``KEY_CACHE_S`` bounds what a process keeps in any case.

KEY_CACHE_S = 60.0
KEY_CACHE_ENTRIES = 10_000


@dataclass(frozen=True)
class _Checked:
    generation: str
    until: float  # time.monotonic()
    key: ApiKey


_checked: dict[str, _Checked] = {}
_GENERATION = Generation(
    "keys:generation",
    forget=_checked.clear,
    unread="every key is checked in the database",
    unsent="other processes keep their cached keys (for KEY_CACHE_S)",
)


def _copy(key: ApiKey) -> ApiKey:
    """A caller's own instances: a request may change what it was given, not the cache's."""
    mine = copy.copy(key)
    if key.agent_id is not None:
        mine.agent = copy.copy(key.agent)
    if key.user_id is not None:
        mine.user = copy.copy(key.user)
    return mine


def keys_changed(using: str = "default") -> None:
    """A key, an agent or a user changed: every process checks keys in the database again
    (now, and once more after the commit)."""
    _GENERATION.changed(using)


def _touch(key: ApiKey) -> None:
    # One write a minute per key, not one per request.
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        hit = _checked.get(key.key_hash)
        if hit is not None:  # what the cached key says from now on
            hit.key.last_used_at = now


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
