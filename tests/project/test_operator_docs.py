"""What an operator copies from the README, compose.yaml and docs/operations.md works as shipped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from django.contrib.auth import password_validation
from django.contrib.auth.models import User

ROOT = Path(__file__).resolve().parents[2]
IMPRI_SERVICES = ("migrate", "web", "worker", "beat")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def password_examples() -> list[tuple[str, str, str]]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in re.finditer(
            r"createreviewer (\S+)[^\n]*--password[ =]'([^']+)'|"
            r"IMPRI_REVIEWER_PASSWORD=['\"]?([^'\"\s]+)",
            text,
        ):
            user, password = match.group(1) or "rita", match.group(2) or match.group(3)
            found.append((path.name, user, password))
    return found


@pytest.mark.django_db
def test_every_password_in_the_docs_passes_the_validators():
    for where, user, password in password_examples():
        password_validation.validate_password(password, User(username=user))  # raises if not
        assert where


def test_the_scan_finds_a_refused_example():
    assert re.search(r"--password[ =]'([^']+)'", "createreviewer rita --password 'choose-one'")


def test_compose_gives_every_impri_service_the_one_grant_key():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for name in IMPRI_SERVICES:
        service = compose["services"][name]
        assert service["environment"]["IMPRI_GRANT_SIGNING_KEY_FILE"] == "/run/secrets/grant_key"
        assert "grant_key" in service["secrets"], name
    assert compose["secrets"]["grant_key"] == {"file": "./secrets/grant_key"}


def test_the_readme_makes_every_secret_compose_mounts():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    readme = (ROOT / "README.md").read_text()
    step = readme[readme.index("mkdir -p secrets") : readme.index("chmod 600 secrets/*")]
    for secret in compose["secrets"]:
        assert f"secrets/{secret}" in step or secret in step.split("for k in")[1].split(";")[0]


def test_operations_lists_every_key_with_backup_and_rotation():
    text = (ROOT / "docs/operations.md").read_text()
    section = text[text.index("## Keys and secrets") : text.index("## Upgrades")]
    for key in ("SECRET_KEY", "grant signing key", "checkpoint key", "webhook secrets"):
        assert key in section, key
    for column in ("back it up", "rotate it", "if replicas disagree"):
        assert column in section
    backup = text[text.index("## Backup") : text.index("## Restore")]
    assert "secret_key" in backup and "grant-keys/" in backup
