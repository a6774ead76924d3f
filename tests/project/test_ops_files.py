"""The files an operator runs: compose.yaml, the Dockerfile, the lock, README and CI in step.

The image itself is built and run by `.ci/image_check.py` (it needs root and podman);
these checks are the cheap half that every test run can afford.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
IMPRI_SERVICES = ("migrate", "web", "worker", "beat")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def compose_errors(document: dict) -> list[str]:
    schema = json.loads((ROOT / "tests/data/compose-spec.json").read_text())
    validator = jsonschema.Draft201909Validator(
        schema, format_checker=jsonschema.Draft201909Validator.FORMAT_CHECKER
    )
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(document)
    ]


def test_compose_follows_the_compose_specification(compose):
    assert compose_errors(compose) == []


def test_the_schema_check_catches_a_misspelt_key(compose):
    broken = copy.deepcopy(compose)
    broken["services"]["web"]["comand"] = broken["services"]["web"].pop("command")
    assert any("comand" in error for error in compose_errors(broken))


def test_compose_runs_the_scaled_stack(compose):
    services = compose["services"]
    assert {"postgres", "redis", *IMPRI_SERVICES} <= set(services)
    assert services["migrate"]["command"][-2:] == ["migrate", "--no-input"]
    assert services["migrate"]["restart"] == "no"
    assert "--no-migrate" in services["web"]["command"]
    assert services["web"]["deploy"]["replicas"] >= 2
    assert "ports" not in services["web"]  # replicas sit behind the proxy, not on host ports
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
    for name in ("postgres", "redis", "web", "worker"):
        assert services[name]["healthcheck"]["test"], name
    assert "postgres-data" in compose["volumes"]


def test_every_impri_service_shares_one_secret_key_from_secrets(compose):
    services = compose["services"]
    for name in IMPRI_SERVICES:
        env = services[name]["environment"]
        assert env["SECRET_KEY_FILE"] == "/run/secrets/secret_key", name
        assert "secret_key" in services[name]["secrets"], name
        assert "SECRET_KEY" not in env, name
        assert env["DATABASE_URL"].startswith("postgres://") and env["REDIS_URL"], name
    assert compose["secrets"]["secret_key"] == {"file": "./secrets/secret_key"}


def test_compose_sets_only_variables_impri_reads(compose):
    documented = set(re.findall(r"^([A-Z_]+)=", (ROOT / ".env.example").read_text(), re.M))
    documented.add("IMPRI_TRUSTED_PROXIES")  # read and documented by the trusted-proxies change
    for name in IMPRI_SERVICES:
        for variable in compose["services"][name]["environment"]:
            assert variable.removesuffix("_FILE") in documented, (name, variable)


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_image_contract_is_in_the_dockerfile():
    instructions = dockerfile_instructions()
    froms = [arg.split()[0] for op, arg in instructions if op == "FROM"]
    assert len(froms) >= 2 and set(froms) == {"python:3.11-slim"}  # multi-stage, one base
    runtime = instructions[max(i for i, (op, _) in enumerate(instructions) if op == "FROM") :]
    env = " ".join(arg for op, arg in runtime if op == "ENV")
    assert "IMPRI_DATA_DIR=/data" in env
    assert "/opt/impri/bin" in env  # impri on PATH
    [user] = [arg for op, arg in runtime if op == "USER"]
    assert user not in ("root", "0")
    assert ("VOLUME", "/data") in runtime
    [health] = [arg for op, arg in runtime if op == "HEALTHCHECK"]
    assert "/healthz" in health and "IMPRI_PORT" in health
    [cmd] = [json.loads(arg) for op, arg in runtime if op == "CMD"]
    assert cmd == ["impri-start", "serve"]  # host and port come from IMPRI_HOST / IMPRI_PORT
    assert not any(
        op == "COPY" and "--from" not in arg and "impri-start" not in arg for op, arg in runtime
    )
    labels = " ".join(arg for op, arg in runtime if op == "LABEL")
    for label in ("title", "version", "source", "licenses", "description"):
        assert f"org.opencontainers.image.{label}=" in labels
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"ARG IMPRI_VERSION={version}" in (ROOT / "Dockerfile").read_text()


def test_the_image_build_installs_with_the_lock():
    build = [arg for op, arg in dockerfile_instructions() if op == "RUN"]
    assert any("--require-hashes -r requirements.lock" in arg for arg in build)
    assert any("install --no-deps ." in arg for arg in build)  # Impri adds no unlocked package
    ci = (ROOT / ".ci/run").read_text()
    assert "--require-hashes -r requirements.lock" in ci  # and the suite runs on the lock


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_lock_pins_every_runtime_dependency():
    lock = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("--hash="):
            assert "==" in line and line.endswith("\\"), line  # pinned, its hashes follow
            lock[_name(line)] = line
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [_name(r) for r in wanted if _name(r) not in lock] == []
    for test_only in ("pytest", "playwright", "ruff", "hypothesis"):
        assert test_only not in lock


def readme_command(word: str) -> str:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    [command] = [line for block in blocks for line in block.splitlines() if word in line][:1]
    return command


def test_run_and_test_commands_use_separate_environments():
    run = readme_command("bin/impri serve")
    test = readme_command("bin/pytest")
    run_env = shlex.split(run)[3]
    test_env = shlex.split(test)[3]
    assert run_env != test_env
    assert "[test]" not in run and "pip install ." in run


def test_ci_runs_the_readmes_test_command_and_the_install_and_image_legs():
    ci = (ROOT / ".ci/run").read_text()
    test = readme_command("bin/pytest")
    assert f'{test} "$@"' in ci
    assert "python3 .ci/install_check.py" in ci
    assert ".ci/image_check" in ci
    assert ".ci/proxy_check.py" in ci
    assert "IMPRI_CALLBACK_ALLOWED_NETWORKS" in (ROOT / ".ci/install_check.py").read_text()
