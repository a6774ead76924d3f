"""Configuration: environment only, safe defaults, every variable documented."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.source import application_trees

ROOT = Path(__file__).resolve().parent.parent


def settings_in(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("IMPRI_") and k not in ("SECRET_KEY",)
    }
    clean.pop("DATABASE_URL", None)
    clean.pop("REDIS_URL", None)
    code = "from django.conf import settings as s; print(s.SECRET_KEY); print(s.DATABASES['default']['ENGINE'])"
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='impri.settings'; " + code,
        ],
        env={**clean, "IMPRI_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
    )


def test_without_secret_key_one_is_generated_once_and_kept_private(tmp_path):
    first = settings_in(tmp_path)
    second = settings_in(tmp_path)
    assert first.returncode == 0, first.stderr
    key = first.stdout.splitlines()[0]
    assert len(key) >= 50
    assert second.stdout.splitlines()[0] == key
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0
    other = settings_in(tmp_path / "elsewhere")
    assert other.stdout.splitlines()[0] != key


def test_secret_key_from_the_environment_wins(tmp_path):
    assert settings_in(tmp_path, SECRET_KEY="from-env").stdout.splitlines()[0] == "from-env"


def test_database_url_switches_to_postgresql(tmp_path):
    out = settings_in(tmp_path, DATABASE_URL="postgres://u:p@db:5432/impri").stdout.splitlines()
    assert out[1] == "django.db.backends.postgresql"
    assert settings_in(tmp_path).stdout.splitlines()[1] == "django.db.backends.sqlite3"


def test_a_bad_number_fails_loudly_naming_the_variable(tmp_path):
    result = settings_in(tmp_path, IMPRI_MAX_BODY_BYTES="lots")
    assert result.returncode != 0
    assert "IMPRI_MAX_BODY_BYTES must be an integer" in result.stderr


# Every way application code reads an environment variable.
ENV_READ = re.compile(
    r"""(?:\benv(?:bool|int|float)?\(|environ\.get\(|environ\[|getenv\()\s*["']([A-Z][A-Z0-9_]*)["']"""
)
APP_DIRS = tuple(name for name in application_trees() if name not in ("clients", "examples"))


def variables_read() -> set[str]:
    read = set()
    for folder in APP_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            if "migrations" not in path.parts:
                read |= set(ENV_READ.findall(path.read_text()))
    return read - {"DJANGO_SETTINGS_MODULE"}


def test_the_scan_sees_reads_outside_settings():
    # The scan itself must be able to fail: it finds the reads it is meant to find.
    assert {"IMPRI_API_KEY", "IMPRI_HOST", "IMPRI_DATA_DIR", "DATABASE_URL"} <= variables_read()


def test_env_example_lists_every_variable_the_code_reads():
    read = variables_read()
    documented = set(
        re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.M)
    )
    assert sorted(read - documented) == []
    readme = (ROOT / "README.md").read_text()
    assert [name for name in sorted(read) if f"`{name}`" not in readme] == []


def test_the_console_script_wraps_manage_py():
    script = Path(sys.executable).parent / "impri"
    assert script.exists(), "install the project (pip install -e .) so the impri script exists"
    result = subprocess.run([str(script), "help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("serve", "createagent", "createreviewer", "token", "migrate"):
        assert command in result.stdout


def test_serve_makes_full_garbage_collections_rarer(settings):
    import gc

    from impri.management.commands import serve

    settings.IMPRI_GC_FULL_EVERY = 1234
    before = gc.get_threshold()
    try:
        serve._tune_gc()
        assert gc.get_threshold() == (before[0], before[1], 1234)
    finally:
        gc.set_threshold(*before)


def test_the_data_dir_and_the_sqlite_database_are_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    result = settings_in(data)
    assert result.returncode == 0, result.stderr
    assert data.stat().st_mode & 0o777 == 0o700
    assert (data / "impri.sqlite3").stat().st_mode & 0o777 == 0o600
    assert (data / "secret_key").stat().st_mode & 0o777 == 0o600
    fresh = tmp_path / "fresh" / "data"
    assert settings_in(fresh).returncode == 0
    assert fresh.stat().st_mode & 0o777 == 0o700
