"""Commands as an operator runs them: into a pipe, at a terminal, typing at a prompt."""

from __future__ import annotations

import fcntl
import os
import select
import sqlite3
import subprocess
import sys
import termios
import time

import pytest

from tests.project.test_cli import ROOT, impri

pytestmark = pytest.mark.e2e

SECRET = "terminal-test"


def clean_env(data, **env: str) -> dict:
    """This process's environment without its Impri configuration: the module's SQLite data."""
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("IMPRI_", "DJANGO_", "NO_COLOR"))
        and k not in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL")
    }
    return {
        **kept,
        "PYTHONPATH": str(ROOT),
        "IMPRI_DATA_DIR": str(data),
        "SECRET_KEY": SECRET,
        **env,
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("terminal")
    data = root / "data"
    done = impri("migrate", cwd=root, IMPRI_DATA_DIR=str(data), SECRET_KEY=SECRET)
    assert done.returncode == 0, done.stderr
    return data


def run(data, *args: str, **env: str) -> subprocess.CompletedProcess:
    return impri(*args, cwd=data.parent, IMPRI_DATA_DIR=str(data), SECRET_KEY=SECRET, **env)


class Terminal:
    """`impri ARGS` on a pseudo-terminal that is its controlling terminal (getpass reads it)."""

    def __init__(self, data, *args: str, **env: str):
        self.master, slave = os.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "impri", *args],
            env=clean_env(data, **env),
            cwd=data.parent,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.master], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"{text!r} never came; the terminal shows {self.seen!r}")
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # the command ended and closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"{text!r} never came; the terminal shows {self.seen!r}")
            self.seen += chunk.decode(errors="replace")
        found, self.seen = self.seen, self.seen[self.seen.index(text) + len(text) :]
        return found

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self) -> tuple[int, str]:
        rest = self.seen
        while True:
            ready, _, _ = select.select([self.master], [], [], 60)
            try:
                chunk = os.read(self.master, 4096) if ready else b""
            except OSError:
                chunk = b""
            if not chunk:
                break
            rest += chunk.decode(errors="replace")
        os.close(self.master)
        return self.process.wait(60), rest


# --- createagent: one line and a non-zero exit ----------------------------------------------


def test_createagent_with_a_name_too_long_is_one_line(data):
    done = run(data, "createagent", "x" * 150)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "CommandError: agent name is 150 characters long: at most 100"
    ]
    assert done.stdout == ""


def test_createagent_twice_fails_and_the_shell_recipe_carries_no_empty_key(data):
    assert run(data, "createagent", "twice-bot").returncode == 0
    again = run(data, "createagent", "twice-bot")
    assert again.returncode == 1 and again.stdout == ""
    assert len(again.stderr.strip().splitlines()) == 1
    assert "already exists: nothing changed" in again.stderr
    # docs/agents.md's recipe: the variable is never exported empty.
    recipe = (
        "IMPRI_API_KEY=$(impri createagent twice-bot | awk '/^Agent key:/ {print $3}')\n"
        'export IMPRI_API_KEY="${IMPRI_API_KEY:?createagent printed no key}"\n'
        'echo "exported $IMPRI_API_KEY"\n'
    )
    shell = subprocess.run(
        ["sh", "-c", recipe],
        env=clean_env(data, PATH=f"{sys.prefix}/bin:{os.environ['PATH']}"),
        cwd=data.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shell.returncode != 0 and "exported" not in shell.stdout
    assert "createagent printed no key" in shell.stderr


# --- impri agents: no escapes into a pipe, colour only at a terminal ---------------------------


@pytest.fixture(scope="module")
def hostile_name(data) -> str:
    """An agent named before names were checked, with a screen-clearing escape in it."""
    assert run(data, "createagent", "plain-bot").returncode == 0
    with sqlite3.connect(data / "impri.sqlite3") as db:
        db.execute(
            "UPDATE approvals_agent SET name = ? WHERE name = 'plain-bot'", ("evil\x1b[2J\x07",)
        )
    return "evil\\x1b[2J\\x07"


def test_agents_into_a_pipe_prints_no_escape(data, hostile_name):
    done = run(data, "agents")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stdout
    assert done.stdout.splitlines()[0].startswith("NAME")
    assert any(line.startswith(hostile_name) for line in done.stdout.splitlines())


def test_agents_at_a_terminal_has_colour_unless_no_color(data, hostile_name):
    code, coloured = Terminal(data, "agents").finish()
    assert code == 0 and "\x1b[" in coloured.splitlines()[0]
    assert "\x1b[2J" not in coloured and hostile_name in coloured
    code, plain = Terminal(data, "agents", NO_COLOR="1").finish()
    assert code == 0 and "\x1b" not in plain, plain
    assert hostile_name in plain


# --- createreviewer --password-prompt: a weak password is asked again -------------------------


def test_the_prompt_asks_again_after_a_weak_password(data):
    terminal = Terminal(data, "createreviewer", "pat", "--password-prompt")
    terminal.expect("Password: ")
    terminal.type("abc")
    terminal.expect("Password (again): ")
    terminal.type("abc")
    refused = terminal.expect("Password: ")
    assert "Password refused: This password is too short." in refused
    assert "Try again." in refused
    terminal.type("a long and private phrase 9")
    terminal.expect("Password (again): ")
    terminal.type("a long and typo'd phrase 9")
    assert "The passwords differ: try again." in terminal.expect("Password: ")
    terminal.type("a long and private phrase 9")
    terminal.expect("Password (again): ")
    terminal.type("a long and private phrase 9")
    code, rest = terminal.finish()
    assert code == 0 and "Created reviewer pat in reviewers." in rest
    check = run(
        data,
        "shell",
        "--no-imports",
        "-c",
        "from django.contrib.auth.models import User; "
        "print(User.objects.get(username='pat').check_password('a long and private phrase 9'))",
    )
    assert check.stdout.strip() == "True", check.stderr


def test_the_prompt_gives_up_after_three_refusals_and_creates_nobody(data):
    terminal = Terminal(data, "createreviewer", "quinn", "--password-prompt")
    for _ in range(3):
        terminal.expect("Password: ")
        terminal.type("short")
        terminal.expect("Password (again): ")
        terminal.type("short")
    code, rest = terminal.finish()
    assert code == 1
    assert "no acceptable password after 3 attempts: nothing changed" in rest
    check = run(
        data,
        "shell",
        "--no-imports",
        "-c",
        "from django.contrib.auth.models import User; "
        "print(User.objects.filter(username='quinn').exists())",
    )
    assert check.stdout.strip() == "False", check.stderr
