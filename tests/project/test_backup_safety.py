"""`impri backup` as a cron line runs it: private copies, whole or absent, never a surprise tree."""

from __future__ import annotations

import sqlite3
import stat

import pytest

from tests.project.test_cli import impri

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A migrated SQLite data directory (one `impri migrate` for the module)."""
    root = tmp_path_factory.mktemp("backup")
    data = root / "data"
    done = impri("migrate", cwd=root, IMPRI_DATA_DIR=str(data), SECRET_KEY="backup-test")
    assert done.returncode == 0, done.stderr
    return data


def backup(data, *args: str, cwd):
    return impri("backup", *args, cwd=cwd, IMPRI_DATA_DIR=str(data), SECRET_KEY="backup-test")


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_copy_is_readable_by_its_owner_only(data, tmp_path):
    target = tmp_path / "impri.sqlite3"
    done = backup(data, str(target), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert mode(target) == 0o600
    assert sqlite3.connect(target).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_the_default_copy_goes_in_a_private_backups_directory(data, tmp_path):
    done = backup(data, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (copy,) = (data / "backups").glob("impri-*.sqlite3")
    assert done.stdout.split()[-1] == str(copy)
    assert mode(copy) == 0o600 and mode(data / "backups") == 0o700


def test_a_directory_gets_a_timestamped_copy_inside_and_nothing_else(data, tmp_path):
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    done = backup(data, str(shelf), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (copy,) = shelf.iterdir()  # no .partial, no journal left beside it
    assert copy.name.startswith("impri-") and copy.suffix == ".sqlite3"
    assert done.stdout.split()[-1] == str(copy)
    assert [p.name for p in tmp_path.iterdir()] == ["shelf"]  # no shelf.partial
    assert mode(copy) == 0o600


def test_a_missing_directory_is_refused_in_one_line_and_not_made(data, tmp_path):
    target = tmp_path / "no" / "such" / "impri.sqlite3"
    done = backup(data, str(target), cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"CommandError: no directory {tmp_path / 'no' / 'such'}: create it first "
        "(impri backup makes none)"
    ]
    assert not (tmp_path / "no").exists()


def test_a_directory_named_with_a_slash_must_exist(data, tmp_path):
    done = backup(data, f"{tmp_path / 'later'}/", cwd=tmp_path)
    assert done.returncode != 0
    assert f"no directory {tmp_path / 'later'}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "later").exists()


def test_the_live_database_is_never_the_target(data, tmp_path):
    before = (data / "impri.sqlite3").stat().st_size
    done = backup(data, str(data / "impri.sqlite3"), cwd=tmp_path)
    assert done.returncode != 0 and "is the live database" in done.stderr
    assert (data / "impri.sqlite3").stat().st_size == before
