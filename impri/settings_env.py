"""Reading environment variables for ``impri/settings.py``: one variable, one typed value.

Every reader takes the variable's name (so an error names it); its default, as text
the way it would be written in ``.env.example``, comes from the one list of variables
(``impri/settings_vars.py``) unless the call computes one. A name that is not listed
there is refused. A bad value is an ``ImproperlyConfigured`` naming the variable, never a
silent default.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

from impri import settings_vars


def env(name: str, default: str | None = None) -> str:
    """Read a variable; ``NAME_FILE`` (a Docker secret) wins over ``NAME``."""
    listed = settings_vars.default(name)  # KeyError: read a variable that is not listed
    if default is None:
        default = listed
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise ImproperlyConfigured(
                f"{name}_FILE: cannot read {file_path} ({reason}). Point {name}_FILE at a "
                f"file this user ({_user()}) can read, or set {name} instead"
            ) from None
    return os.environ.get(name, default)


def _user() -> str:
    try:
        # deferred: POSIX only: the ImportError below is Windows
        import pwd

        return f"{pwd.getpwuid(os.geteuid()).pw_name}, uid {os.geteuid()}"
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}"


def _source(name: str) -> str:
    """How an error names where a value came from: the variable, or its file."""
    path = os.environ.get(f"{name}_FILE")
    return f"{name}_FILE ({path})" if path else name


def without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def envredis(name: str) -> str:
    """A Redis URL (``redis://``, ``rediss://``, ``unix://``), or empty."""
    value = env(name).strip()
    if value and urlsplit(value).scheme not in ("redis", "rediss", "unix"):
        raise ImproperlyConfigured(
            f"{name} must be a redis:// URL (e.g. redis://localhost:6379/0), not "
            f"{without_password(value)!r}; unset it for the embedded in-memory layer"
        )
    return value


def envkey(name: str) -> str:
    """An Ed25519 private key as PEM text (grants), or empty; anything else is one clear error."""
    value = env(name)
    if not value:
        return value
    # deferred: only with a key in the environment; beat reads these settings and signs nothing
    from cryptography.hazmat.primitives import serialization

    # deferred: only with a key in the environment; beat reads these settings and signs nothing
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(value.encode(), password=None)
    except (ValueError, TypeError) as exc:
        reason = str(exc).split(".")[0]
        key = None
    else:
        reason = (
            f"{type(key).__name__.removeprefix('_').removesuffix('PrivateKey')} key, not Ed25519"
        )
    if not isinstance(key, Ed25519PrivateKey):
        target = os.environ.get(f"{name}_FILE") or "grant_key.pem"
        raise ImproperlyConfigured(
            f"{_source(name)} is not an Ed25519 private key in PEM ({reason}). Make one with "
            f"`impri grantkey new > {target}`, or unset it to generate one in the data dir"
        )
    return value


def envbool(name: str, default: str | None = None) -> bool:
    value = env(name, default).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def envint(name: str, default: str | None = None, minimum: int = 0) -> int:
    return _number(name, default, minimum, int, "an integer")


def envfloat(name: str, default: str | None = None, minimum: float = 0.0) -> float:
    return _number(name, default, minimum, float, "a number")


def _number(name: str, default: str | None, minimum, parse, what: str):
    if default is None:
        default = settings_vars.default(name)
    value = env(name, default) or default  # set but empty: the default
    try:
        number = parse(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, not {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}")
    return number


def envnetworks(name: str) -> list:
    """Comma-separated CIDRs as networks (host bits must be zero)."""
    try:
        return [ipaddress.ip_network(p.strip()) for p in env(name).split(",") if p.strip()]
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be comma-separated CIDRs ({exc})") from None


def envcidrs(name: str) -> list[str]:
    """Comma-separated CIDRs as normalized text (host bits are dropped: 10.0.0.1/8 → 10.0.0.0/8)."""
    found = []
    for cidr in (c.strip() for c in env(name).split(",")):
        if not cidr:
            continue
        try:
            found.append(str(ipaddress.ip_network(cidr, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {cidr!r} is not an IP network (CIDR)") from None
    return found


def private(path: Path, mode: int, *, directory: bool = False) -> None:
    """Create ``path`` (if missing) readable by this user only, and tighten it if it is ours.

    The data dir holds the SQLite database (sessions, key hashes) and the secret
    key: with the default umask both were world-readable.
    """
    try:
        if directory:
            path.mkdir(mode=mode, parents=True, exist_ok=True)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, mode))
        if path.stat().st_uid == os.geteuid():
            path.chmod(mode)
    except OSError:
        pass  # a read-only or foreign data dir: the database open reports the real problem
