#!/usr/bin/env python3
"""CI leg: build the image from the Dockerfile and run what it contains.

There is no Docker daemon on these machines and containers cannot start, so
(as ../shared/notes/container.md records) podman builds the image and its
commands run from the image's own filesystem: a chroot into a buildah mount,
as the image's user, with the image's environment and nothing of the host's.

1. Tools (podman, buildah, debootstrap) and, when no `python:3.11-slim` can be
   pulled, a stand-in base image built once from Debian's Python 3.11.
2. `podman build` of the Dockerfile; the image's config (user, env, labels,
   command) and filesystem (no source tree, no wheels, no pip) are checked,
   and its size is printed.
3. Embedded: the image's command (`impri-start serve`) with IMPRI_PORT set;
   /healthz with an odd Host; an agent created with the image's `impri`;
   an action pushed.
4. Scaled: every Impri service of compose.yaml (migrate, web, worker, beat)
   runs its `command` and `environment` from the image, with DATABASE_URL and
   REDIS_URL pointing at loopback PostgreSQL and Redis, and the worker delivers
   a webhook to a loopback receiver. Two `web` replicas run, each with its own
   data directory as two containers have: from the compose definitions (the
   grant_key secret) they publish one JWKS key, and /readyz reports one.

Needs root. Usage: DATABASE_URL=postgres://... REDIS_URL=redis://... .ci/image_check.py
(IMPRI_IMAGE_CHECK_REUSE=1 skips the build when the image exists: for iterating on this script.)
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from install_check import Receiver, admin_sql, free_port, http, refund  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TAG = "localhost/impri:ci"
BASE = "docker.io/library/python:3.11-slim"
ROOTFS = Path(os.environ.get("IMPRI_BASE_ROOTFS", "/var/tmp/impri-python-3.11-rootfs"))
STORAGE = ["--storage-driver", "vfs"]
WORK = Path(tempfile.mkdtemp(prefix="impri-image-"))
SPECIAL_MOUNTS = ("proc", "dev", "dev/shm")
IMPRI_SERVICES = ("migrate", "web", "worker", "beat")
# The operator who made secrets/ with `chmod 600`: any uid but the image's.
OPERATOR_UID = 4242


def log(message: str) -> None:
    print(f"image-check: {message}", flush=True)


def sh(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=True, **kwargs)


def out(*args: str) -> str:
    return sh(*args, capture_output=True, text=True).stdout.strip()


def ensure_tools() -> None:
    if all(shutil.which(tool) for tool in ("podman", "buildah", "debootstrap")):
        return
    log("installing podman, buildah and debootstrap")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sh("apt-get", "update", "-qq", env=env)
    sh("apt-get", "install", "-y", "-qq", "podman", "buildah", "debootstrap", env=env)


def ensure_base() -> None:
    """The real base where it can be pulled; else Debian bookworm's Python 3.11 under its name."""
    if subprocess.run(["podman", *STORAGE, "image", "exists", BASE]).returncode == 0:
        return
    try:
        pulled = subprocess.run(
            ["podman", *STORAGE, "pull", "-q", BASE], capture_output=True, timeout=90
        )
        if pulled.returncode == 0:
            return
    except subprocess.TimeoutExpired:
        pass
    log(f"{BASE} cannot be pulled here: building a stand-in from Debian packages")
    if not (ROOTFS / "usr/bin/python3").exists():
        shutil.rmtree(ROOTFS, ignore_errors=True)
        sh(
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python3-pip,python3-venv,ca-certificates",
            "bookworm",
            str(ROOTFS),
            stdout=subprocess.DEVNULL,
        )
    for link, target in (("usr/bin/python", "python3"), ("usr/bin/pip", "pip3")):
        (ROOTFS / link).unlink(missing_ok=True)
        (ROOTFS / link).symlink_to(target)
    for marker in ROOTFS.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    tar = subprocess.Popen(["tar", "-C", str(ROOTFS), "-c", "."], stdout=subprocess.PIPE)
    sh(
        "podman",
        *STORAGE,
        "import",
        "--change",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "-",
        BASE,
        stdin=tar.stdout,
        stdout=subprocess.DEVNULL,
    )
    tar.wait()


def build() -> dict:
    reuse = os.environ.get("IMPRI_IMAGE_CHECK_REUSE") == "1"
    if reuse and subprocess.run(["podman", *STORAGE, "image", "exists", TAG]).returncode == 0:
        log(f"reusing {TAG} (IMPRI_IMAGE_CHECK_REUSE=1)")
    else:
        _build()
    [image] = json.loads(out("podman", *STORAGE, "image", "inspect", TAG))
    size_mb = image["Size"] / 1e6
    log(f"image size: {size_mb:.0f} MB ({image['Size']} bytes)")
    return image["Config"]


def _build() -> None:
    log("podman build")
    started = time.monotonic()
    sh(
        "podman",
        *STORAGE,
        "build",
        "--pull=never",
        # One commit per stage: with the vfs driver every layer is a full copy of the tree.
        "--layers=false",
        "--isolation",
        "chroot",
        "-v",
        "/etc/ssl/certs:/etc/ssl/certs:ro",
        "-t",
        TAG,
        str(ROOT),
    )
    log(f"built in {time.monotonic() - started:.0f}s")


class Mounted:
    """The image's filesystem, mounted, with /proc and /dev for the processes run in it."""

    def __init__(self):
        self.container = out("buildah", *STORAGE, "from", "--pull-never", TAG)
        self.root = Path(out("buildah", *STORAGE, "mount", self.container))
        # /dev/shm too (its own mount): Celery's prefork pool makes semaphores there.
        for special in SPECIAL_MOUNTS:
            sh("mount", "--bind", f"/{special}", str(self.root / special))

    def close(self) -> None:
        for special in reversed(SPECIAL_MOUNTS):
            subprocess.run(["umount", str(self.root / special)])
        subprocess.run(["buildah", *STORAGE, "umount", self.container], capture_output=True)
        subprocess.run(["buildah", *STORAGE, "rm", self.container], capture_output=True)


class Image:
    """Runs commands inside the mounted image as its user, with its environment."""

    def __init__(self, mounted: Mounted, config: dict):
        self.root = mounted.root
        self.user = config["User"]
        self.env = dict(item.split("=", 1) for item in config["Env"])
        self.cmd = config["Cmd"]
        self.processes: list[tuple[str, subprocess.Popen, Path]] = []

    def argv(self, command: list[str], env: dict[str, str], user: str | None = None) -> list[str]:
        variables = [f"{k}={v}" for k, v in {**self.env, **env}.items()]
        user = user or self.user
        return [
            "chroot",
            f"--userspec={user}:{user}",
            str(self.root),
            "env",
            "-i",
            *variables,
            *command,
        ]

    def run(
        self, command: list[str], env: dict[str, str], user: str | None = None
    ) -> subprocess.CompletedProcess:
        done = subprocess.run(
            self.argv(command, env, user), cwd="/", capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise SystemExit(f"image-check: {command} failed:\n{done.stdout}\n{done.stderr}")
        return done

    def start(
        self, name: str, command: list[str], env: dict[str, str], user: str | None = None
    ) -> subprocess.Popen:
        path = WORK / f"{name}.log"
        with open(path, "w") as log_file:
            process = subprocess.Popen(
                self.argv(command, env, user),
                cwd="/",
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append((name, process, path))
        return process

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{path.read_text(errors='replace')[-3000:]}"
            for name, _, path in self.processes
        )

    def stop_all(self) -> None:
        for _, process, _ in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _, process, _ in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()

    def wait_ready(self, base: str, path: str = "/healthz") -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for name, process, _ in self.processes:
                if process.poll() is not None:
                    raise SystemExit(f"image-check: {name} exited early\n{self.logs()}")
            try:
                with urllib.request.urlopen(base + path, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        raise SystemExit(f"image-check: {base}{path} never answered\n{self.logs()}")


def check_config(config: dict, image: Image) -> None:
    labels = config.get("Labels") or {}
    for label in ("title", "version", "source", "licenses"):
        assert labels.get(f"org.opencontainers.image.{label}"), f"label {label} missing"
    assert image.env.get("IMPRI_DATA_DIR") == "/data", image.env
    assert config["User"] not in ("", "root", "0"), config["User"]
    assert "/data" in (config.get("Volumes") or {}), config.get("Volumes")
    assert not any(re.search(r"\b(8000|0\.0\.0\.0)\b", part) for part in image.cmd), image.cmd
    root = image.root
    leftovers = [p for p in ("src", "wheels", "app", "root/.cache/pip") if (root / p).exists()]
    assert not leftovers, f"build leftovers in the image: {leftovers}"
    assert not list(root.glob("opt/impri/lib/python3*/site-packages/pip")), "pip in the venv"
    assert not list(root.glob("opt/impri/lib/python3*/site-packages/tests")), "tests installed"
    which = image.run(["sh", "-c", "command -v impri"], {}).stdout.strip()
    assert which == "/opt/impri/bin/impri", which
    whoami = image.run(["id", "-un"], {}).stdout.strip()
    assert whoami == config["User"], whoami
    log(f"config ok: user {whoami}, impri at {which}, labels {sorted(labels)}")


def embedded(image: Image) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"IMPRI_PORT": str(port)}
    image.start("serve", image.cmd, env)
    image.wait_ready(base)
    request = urllib.request.Request(base + "/healthz", headers={"Host": "10.0.0.7:8000"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.loads(response.read()) == {"status": "ok"}
    created = image.run(["impri", "createagent", "image-bot"], env)
    key = created.stdout.split()[-1]
    assert key.startswith("imp_a_"), created.stdout
    action = http(
        "POST",
        base + "/api/v1/actions",
        key,
        refund("Refund $5 on order 1", 500),
    )
    assert action["status"] == "pending", action
    image.stop_all()
    log(f"embedded ok: {image.cmd} served, agent created with the image's impri, action pushed")


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}, and $$ for a literal $."""

    def one(match: re.Match) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        if variables.get(name):
            return variables[name]
        if op == ":?":
            raise SystemExit(f"image-check: compose needs {name}: {arg}")
        return arg if op == ":-" else ""

    value = re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", one, value)
    return value.replace("$$", "$")


def scaled(image: Image, compose: dict) -> None:
    database_url, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    if not (database_url and redis_url):
        raise SystemExit(
            "image-check: set DATABASE_URL and REDIS_URL (loopback) for the scaled run"
        )
    name = "impri_image_" + secrets.token_hex(4)
    admin_sql(database_url, f'CREATE DATABASE "{name}"')
    # impri-start's copies of the secrets (the image's /dev/shm is the host's here).
    copies_before = set(Path("/dev/shm").glob("impri-secrets.*"))
    # The secrets compose mounts at /run/secrets, made the way the README says: `chmod 600
    # secrets/*`, owned by the operator's own uid (not the image's 10001), as Compose mounts them.
    secrets_dir = image.root / "run/secrets"
    secrets_dir.mkdir(parents=True, exist_ok=True)
    for secret in compose["secrets"]:
        if secret == "grant_key":  # the README: impri grantkey new > secrets/grant_key
            value = image.run(["impri", "grantkey", "new"], {}).stdout
        else:
            value = secrets.token_urlsafe(50) + "\n"
        (secrets_dir / secret).write_text(value)
        (secrets_dir / secret).chmod(0o600)
        os.chown(secrets_dir / secret, OPERATOR_UID, OPERATOR_UID)
    variables = {"POSTGRES_PASSWORD": "ci", "IMPRI_BASE_URL": "http://127.0.0.1"}
    loopback = {
        "DATABASE_URL": urlunsplit(urlsplit(database_url)._replace(path="/" + name)),
        "REDIS_URL": redis_url,
        "IMPRI_TICK_S": "0.5",
        "IMPRI_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8",
    }
    services = compose["services"]

    def user(service: str) -> str | None:
        """Compose's `user:` for the service (root for Impri's: impri-start drops to impri)."""
        return services[service].get("user")

    def service_env(service: str) -> dict[str, str]:
        env = {
            k: interpolate(str(v), variables) for k, v in services[service]["environment"].items()
        }
        # Compose's host names (postgres, redis) are loopback here; HTTPS is the proxy's.
        return {**env, **loopback, "IMPRI_SECURE_COOKIES": "false"}

    try:
        image.run(services["migrate"]["command"], service_env("migrate"), user("migrate"))
        port, port_2 = free_port(), free_port()
        base = f"http://127.0.0.1:{port}"
        for replica, listen in (("web", port), ("web-2", port_2)):
            # Each replica its own /data, as two containers have (compose gives web none).
            env = {
                **service_env("web"),
                "IMPRI_PORT": str(listen),
                "IMPRI_DATA_DIR": f"/tmp/{replica}",
            }
            image.start(replica, services["web"]["command"], env, user("web"))
        image.start("worker", services["worker"]["command"], service_env("worker"), user("worker"))
        image.start("beat", services["beat"]["command"], service_env("beat"), user("beat"))
        image.wait_ready(base, "/readyz")
        image.wait_ready(f"http://127.0.0.1:{port_2}", "/readyz")
        runs_as_the_images_user(image)
        replicas_publish_one_key([base, f"http://127.0.0.1:{port_2}"])

        # `docker compose run --rm web impri ...`: the service's user, the service's secrets.
        env, web_user = service_env("web"), user("web")
        agent = image.run(["impri", "createagent", "compose-bot"], env, web_user).stdout.split()[-1]
        secret = image.run(
            [
                "impri",
                "shell",
                "--no-imports",
                "-c",
                "from approvals.models import Agent; print(Agent.objects.get(name='compose-bot').webhook_secret)",
            ],
            env,
            web_user,
        ).stdout.split()[-1]
        image.run(["impri", "createreviewer", "rita"], env, web_user)
        rita = image.run(["impri", "token", "rita"], env, web_user).stdout.split()[-1]
        receiver = Receiver()
        try:
            action = http(
                "POST",
                base + "/api/v1/actions",
                agent,
                refund("Refund $9 on order 2", 900, callback_url=receiver.url),
            )
            http("POST", f"{base}/api/v1/actions/{action['action_id']}/approve", rita)
            got = receiver.wait(90, image.logs)
            assert receiver.verify(got, secret), got["headers"]
            assert json.loads(got["body"])["status"] == "approved"
        finally:
            receiver.close()
        log(
            "scaled ok: compose's migrate, web, worker and beat ran from the image; webhook delivered"
        )
        run_healthchecks(image, services, {**service_env("worker"), "IMPRI_PORT": str(port)})
    finally:
        image.stop_all()
        admin_sql(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for copy in set(Path("/dev/shm").glob("impri-secrets.*")) - copies_before:
            shutil.rmtree(copy, ignore_errors=True)


def runs_as_the_images_user(image: Image) -> None:
    """Started as root (compose's `user: root`), every Impri process runs as the image's user."""
    expected = image.run(["id", "-u", image.user], {}).stdout.strip()
    for name, process, _ in image.processes:
        status = Path(f"/proc/{process.pid}/status").read_text()
        uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
        assert uid == expected, f"{name} runs as uid {uid}, not {image.user} ({expected})"
    log(f"secrets 0600 of uid {OPERATOR_UID}: every service reads them and runs as uid {expected}")


def replicas_publish_one_key(bases: list[str]) -> None:
    """Every replica's JWKS lists the same single key, and none reports more than one."""
    published = []
    for base in bases:
        with urllib.request.urlopen(base + "/.well-known/jwks.json", timeout=5) as response:
            published.append([key["kid"] for key in json.loads(response.read())["keys"]])
        with urllib.request.urlopen(base + "/readyz", timeout=5) as response:
            keys = json.loads(response.read())["grant_signing_keys"]
        assert keys == {"count": 1}, (base, keys)
    assert all(kids == published[0] for kids in published) and len(published[0]) == 1, published
    log(f"replicas: {len(bases)} web replicas publish one JWKS key ({published[0][0]})")


def run_healthchecks(image: Image, services: dict, env: dict[str, str]) -> None:
    """Each Impri service's compose health check, run in the image beside the running stack."""
    env = {**env, "HOSTNAME": socket.gethostname()}  # what Docker sets in a container
    for name in IMPRI_SERVICES:
        test = services[name].get("healthcheck", {}).get("test")
        if not test:
            continue
        kind, *command = [interpolate(part, {}) for part in test]
        if kind == "CMD-SHELL":
            command = ["sh", "-c", command[0]]
        # The web check asks port 8000, the image's default; here web listens elsewhere.
        command = [
            part.replace("127.0.0.1:8000", f"127.0.0.1:{env['IMPRI_PORT']}") for part in command
        ]
        image.run(command, env, services[name].get("user"))  # as the container's user
        log(f"{name}: compose's health check passes")


def main() -> None:
    if os.geteuid() != 0:
        raise SystemExit("image-check: needs root (podman, chroot, mount)")
    ensure_tools()
    ensure_base()
    config = build()
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    mounted = Mounted()
    try:
        image = Image(mounted, config)
        try:
            check_config(config, image)
            embedded(image)
            scaled(image, compose)
        finally:
            image.stop_all()
    finally:
        mounted.close()
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
