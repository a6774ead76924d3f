"""The ``impri`` console script: a thin wrapper over Django's ``manage.py``.

Before handing over to Django it answers ``--version`` and ``help`` itself
(Impri's commands first), refuses ``impri mcp`` where there is no database,
and turns a configuration error into one line on stderr instead of a traceback.
``impri beat`` runs without Django's apps (:func:`_run_without_apps`).
"""

from __future__ import annotations

import logging.config
import os
import sys
from importlib import metadata
from pathlib import Path

import django
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import execute_from_command_line, get_commands, load_command_class
from django.db import OperationalError

from impri import eventloop, preflight
from impri.management.commands.beat import Command
from impri.settings_env import env

# Long-running commands whose database pool is sized by role (impri/settings.py).
ROLES = ("serve", "worker", "beat", "mcp")
# System-check warnings (impri.W001...) are printed when a long-running process starts, and
# when asked (`impri check`). Django's other commands (`impri migrate`...) stop on errors
# only (settings: SILENCED_SYSTEM_CHECKS for the role "command"); Impri's one-shot commands
# (`impri rules import`, `impri token`...) run none (requires_system_checks = []): every
# check they could fail is the code's, which serve runs.
# The apps whose commands `impri help` lists as Impri's (the operator's commands live in ops).
IMPRI_APPS = ("impri", "ops", "audit", "gateway", "ledger")
HELP_ARGS = ([], ["help"], ["--help"], ["-h"])


def version() -> str:
    try:
        return metadata.version("impri")
    except metadata.PackageNotFoundError:  # running from a source tree that isn't installed
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    drop_working_directory()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")
    args = sys.argv[1:] if argv is None else argv
    if args in (["--version"], ["version"]):
        print(f"impri {version()}")
        return
    if args == ["grantkey", "new"]:
        # Before the settings: no database, no data directory (the README's secrets step).
        # deferred: before the settings, which this key goes into: no model, no data directory
        from approvals.grant_pem import new_pem

        sys.stdout.write(new_pem())
        return
    if args and args[0] in ROLES:
        os.environ.setdefault("IMPRI_PROCESS_ROLE", args[0])
    elif args[:1] not in (["runserver"], ["check"]):
        # A one-shot command loads no Twisted (settings); runserver needs daphne's app, and
        # `impri check` checks the apps serve runs.
        os.environ.setdefault("IMPRI_PROCESS_ROLE", "command")
    if args[:1] == ["mcp"]:
        _refuse_a_fresh_database()
    try:
        eventloop.choose(args[0] if args else None)  # before the settings load daphne
    except eventloop.Unavailable as exc:
        _fail(str(exc))
    _load_settings()
    if args in HELP_ARGS:
        print(help_text())
        return
    if args[:1] == ["beat"]:
        _run_without_apps(args)
        return
    _execute(args)


def _execute(args: list[str]) -> None:
    """Django's command line, its database failures said in one operator line."""
    try:
        execute_from_command_line(["impri", *args])
    except OperationalError as exc:
        line = preflight.connection_failed(exc)
        if line is None:  # connected: a query failed, which is not the operator's to fix here
            raise
        _fail(line, code=1)
    except OSError as exc:
        # The embedded database's folder can't be used (a file where IMPRI_DATA_DIR should
        # be, no permission): Django's checks meet it first, making the keys' file cache.
        data_dir = str(settings.DATA_DIR)
        if settings.DATABASE_URL or not str(exc.filename or "").startswith(data_dir):
            raise
        _fail(preflight.connection_failed(exc) or str(exc), code=1)


def drop_working_directory() -> None:
    """Impri imports its own packages, never a namesake in the folder it was started from.

    ``python -m impri`` puts the working directory first on ``sys.path``, so do Celery's
    Django fix-up (when ``plumbing.celery`` creates the app, on importing ``impri``) and
    daphne's command line (``impri serve`` drops it again once the server runs): started
    in a folder that holds a ``rules/`` or ``audit/`` package, Impri would run that code,
    and started in a checkout, the source tree instead of the installed package.
    """
    here = os.path.realpath(os.getcwd())
    sys.path[:] = [entry for entry in sys.path if os.path.realpath(entry or ".") != here]


def _fail(message: str, code: int = 2) -> None:
    print(f"impri: {message}", file=sys.stderr)
    raise SystemExit(code)


def _load_settings() -> None:
    """Read the settings now, so that a bad variable is one line, not a traceback."""

    try:
        settings.INSTALLED_APPS  # noqa: B018  (the first access reads impri/settings.py)
    except ImproperlyConfigured as exc:
        _fail(str(exc))


def _run_without_apps(args: list[str]) -> None:
    """``impri beat``: Django's command, without ``django.setup()`` (no app, no model).

    Beat sends the schedule's tasks by name and nothing else (its command says how), so of
    what ``django.setup()`` does only logging is done here: Impri's ``LOGGING``. Django's
    defaults under it are for Django's own loggers (requests, an e-mail to ``ADMINS``),
    which beat never logs to; their e-mail handler alone would import the ORM.
    """

    logging.captureWarnings(True)  # as Django's configure_logging does
    logging.config.dictConfig(settings.LOGGING)
    Command().run_from_argv(["impri", *args])


def _refuse_a_fresh_database() -> None:
    """``impri mcp`` is started by an agent host from any directory: never invent a database there.

    Reading the settings would create the data directory and a secret key, and
    SQLite would create an empty database, so this runs first, on the same
    default as ``impri/settings.py`` (``IMPRI_DATA_DIR``, else ``./impri-data``).
    """
    if env("DATABASE_URL"):
        return
    data_dir = Path(env("IMPRI_DATA_DIR") or Path.cwd() / "impri-data").resolve()
    database = data_dir / "impri.sqlite3"
    if not database.exists():
        hint = "" if env("IMPRI_DATA_DIR") else " (IMPRI_DATA_DIR is not set)"
        _fail(
            f"no Impri database at {database}{hint}. Set IMPRI_DATA_DIR to the data directory "
            "`impri serve` uses (it prints it on start), or DATABASE_URL; to start a new "
            "installation there, run `impri migrate` first."
        )


def help_text() -> str:

    django.setup()

    ours, theirs = [], {}
    for name, app in sorted(get_commands().items()):
        if app in IMPRI_APPS:
            command = load_command_class(app, name)
            summary = (command.help or "").strip().split("\n")[0]
            ours.append(f"  {name:<16}{summary}")
        else:
            theirs.setdefault(app.rpartition(".")[2], []).append(name)
    lines = [
        f"impri {version()}: a human between an AI agent and the actions that matter.",
        "",
        "Usage: impri <command> [options]    (impri help <command> for its options)",
        "",
        "Impri commands:",
        *ours,
        "",
        "Django's commands (impri wraps manage.py):",
        *(f"  [{app}] {', '.join(names)}" for app, names in sorted(theirs.items())),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
