"""Progress bars: on a terminal only (a real pseudo-terminal here), nothing when piped."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys

import pytest

from plumbing.progress import Progress
from tests.conftest import SCALED
from tests.gateway.test_gateway_e2e import TOKEN, UpstreamProcess
from tests.live import Deployment


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_counts_and_says_what_is_left_and_is_silent_off_a_terminal():
    shown = Terminal()
    with Progress("verifying", 4, shown, every_s=0) as bar:
        assert list(bar.track("abcd")) == list("abcd")
    text = shown.getvalue()
    assert "\rverifying [" in text and "2/4  50%" in text and "4/4 100% done in" in text
    assert text.endswith("\n")
    unknown = Terminal()
    with Progress("replaying", None, unknown, every_s=0) as bar:
        list(bar.track(range(3)))
    assert "replaying: 3 so far" in unknown.getvalue()
    piped = io.StringIO()
    with Progress("verifying", 4, piped, every_s=0) as bar:
        list(bar.track("abcd"))
    assert piped.getvalue() == ""


def test_a_blocking_step_keeps_its_time_moving_on_a_terminal_only():
    import time

    shown = Terminal()
    with Progress("asking the upstream", None, shown, every_s=0.05) as bar, bar.ticking():
        time.sleep(0.5)  # the step that blocks: nothing advances
    redraws = shown.getvalue().count("\r")
    assert redraws >= 4, shown.getvalue()  # drawn while it waited, not only at the end
    assert "asking the upstream (0s)" in shown.getvalue()
    piped = io.StringIO()
    with Progress("asking the upstream", None, piped, every_s=0.05) as bar, bar.ticking():
        time.sleep(0.2)
    assert piped.getvalue() == ""


def run_at_terminal(deployment, *args: str) -> tuple[int, str]:
    """Run `impri ARGS` with stderr on a pseudo-terminal; its exit code and what it drew."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "impri", *args],
        env=deployment.env,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        stdin=subprocess.DEVNULL,
    )
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return process.wait(60), b"".join(chunks).decode(errors="replace")


@pytest.mark.e2e
def test_long_commands_draw_a_bar_on_a_terminal_and_nothing_when_piped():
    deployment = Deployment()
    try:
        deployment.impri("migrate", "--no-input")
        deployment.impri("createagent", "bar-bot")  # some audit events to verify
        rules = deployment.data_dir / "rules.yaml"
        rules.write_text("rules: []\n")
        commands = [("audit", "verify"), ("prune", "--days", "1")]
        if not SCALED:
            commands.append(("backup", str(deployment.data_dir / "copy.sqlite3")))
        for command in commands:
            code, drawn = run_at_terminal(deployment, *command)
            assert code == 0, drawn
            assert "\r" in drawn and "[" in drawn and "100%" in drawn, (command, drawn)
            piped = deployment.impri(*command)
            assert "\r" not in piped.stderr and "%" not in piped.stderr, (command, piped.stderr)
        upstream = UpstreamProcess(deployment.data_dir / "calls.jsonl")
        upstream.start()
        try:
            gateways = deployment.data_dir / "gateways.yaml"
            gateways.write_text(
                f"gateways:\n  - name: psp\n    url: {upstream.url}\n"
                '    headers: {Authorization: "Bearer ${PSP_TOKEN}"}\n    default: deny\n'
            )
            deployment.env["PSP_TOKEN"] = TOKEN  # the upstream's bearer token, as ${PSP_TOKEN}
            deployment.impri("gateway", "import", str(gateways))
            code, drawn = run_at_terminal(deployment, "gateway", "refresh", "psp")
            assert code == 0, drawn
            assert "\rgateway psp: asking the upstream for its tools (" in drawn, drawn
            piped = deployment.impri("gateway", "refresh", "psp")
            assert "\r" not in piped.stderr and "asking" not in piped.stderr, piped.stderr
        finally:
            upstream.stop()
        code, drawn = run_at_terminal(deployment, "rules", "backtest", str(rules))
        assert code == 0 and "\rreplaying past actions [" in drawn and "0/0" in drawn, drawn
    finally:
        deployment.close()
