"""One list of environment variables (impri/settings_vars.py): the code reads exactly those,
the settings take their defaults from it, and docs/configuration.md is generated from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from impri import settings_env, settings_vars
from tests.project.test_settings import variables_read

ROOT = Path(__file__).resolve().parents[2]


def test_every_variable_read_is_listed_and_every_listed_one_is_read():
    listed = {var.name for var in settings_vars.VARIABLES}
    read = variables_read()
    assert sorted(read - listed) == [], "read but not listed in impri/settings_vars.py"
    assert sorted(listed - read) == [], "listed in impri/settings_vars.py but never read"
    assert len(listed) == len(settings_vars.VARIABLES), "a variable is listed twice"


def test_each_entry_says_what_it_means_and_who_reads_it():
    for var in settings_vars.VARIABLES:
        assert var.shown and var.meaning and var.roles, var.name


def test_docs_configuration_is_generated_from_the_list():
    text = (ROOT / "docs/configuration.md").read_text()
    assert text == settings_vars.markdown(), (
        "regenerate: python -m impri.settings_vars > docs/configuration.md"
    )


def test_the_readme_links_the_list_instead_of_copying_it():
    readme = (ROOT / "README.md").read_text()
    assert "docs/configuration.md" in readme
    assert "| variable | default | meaning |" not in readme


def test_the_readers_take_the_listed_default_and_refuse_an_unlisted_name(monkeypatch):
    for name in ("IMPRI_PORT", "IMPRI_PORT_FILE", "IMPRI_TICK_S", "IMPRI_TICK_S_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert settings_env.envint("IMPRI_PORT") == int(settings_vars.default("IMPRI_PORT")) == 8000
    assert settings_env.envfloat("IMPRI_TICK_S") == 2.0
    monkeypatch.setenv("IMPRI_PORT", "8123")
    assert settings_env.envint("IMPRI_PORT") == 8123
    with pytest.raises(KeyError, match="IMPRI_NOT_A_VARIABLE is not listed"):
        settings_env.env("IMPRI_NOT_A_VARIABLE")
