"""Schemathesis over a real `impri serve`: the OpenAPI document against what the API does.

Runs twice, once with an agent key and once with a (staff) reviewer token, with
every check and the stateful phase on. Any server error or schema violation
fails the run. Usage (from the repository root, with the project installed in
PYTHON's environment and schemathesis on PATH or as SCHEMATHESIS):

    python .ci/schemathesis.py [--max-examples N]
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live import Deployment  # noqa: E402

CONFIG = ROOT / ".ci" / "schemathesis.toml"
PASSWORD = "schemathesis-" + secrets.token_hex(8)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-examples", type=int, default=40)
    parser.add_argument("--max-time", type=int, default=600, help="seconds per persona")
    parser.add_argument("--schemathesis", default=os.environ.get("SCHEMATHESIS", "schemathesis"))
    args = parser.parse_args()
    # It runs from the deployment's data dir: a relative path must be made absolute first.
    if os.sep in args.schemathesis:
        args.schemathesis = os.path.abspath(args.schemathesis)
    deployment = Deployment()
    try:
        # Long-polls answer at once; no rate limit, so every call is a real test.
        server = deployment.start_server(IMPRI_MAX_AWAIT_S="1", IMPRI_RATE_LIMIT_PER_MIN="0")
        agent_key = deployment.last_word("createagent", "schemathesis-bot")
        deployment.impri(
            "createsuperuser",
            "--noinput",
            "--username",
            "auditor",
            "--email",
            "a@example.com",
            DJANGO_SUPERUSER_PASSWORD=PASSWORD,
        )
        # The superuser joins the reviewers: createreviewer changes an existing user only
        # when told to reset the password (here to the one it has).
        deployment.impri(
            "createreviewer",
            "auditor",
            "--group",
            "reviewers",
            "--reset-password",
            IMPRI_REVIEWER_PASSWORD=PASSWORD,
        )
        reviewer_key = deployment.last_word("token", "auditor")
        _seed(server.url, agent_key, reviewer_key)
        failed = False
        for persona, key in (("agent", agent_key), ("reviewer", reviewer_key)):
            print(f"== schemathesis as the {persona}", flush=True)
            command = [
                args.schemathesis,
                "--config-file",
                str(CONFIG),
                "run",
                f"{server.url}/api/v1/openapi.json",
                "--header",
                f"Authorization: Bearer {key}",
                "--checks",
                "all",
                # Another persona's or an unknown id is a 403/404 by design, not a bug.
                "--exclude-checks",
                "ignored_auth,use_after_free,ensure_resource_availability",
                "--phases",
                "examples,coverage,fuzzing,stateful",
                "--max-examples",
                str(args.max_examples),
                "--max-time",
                str(args.max_time),
                "--request-timeout",
                "30",
                # One worker: hypothesis' lambda descriptions are not thread-safe on 3.11.
                "--workers",
                "1",
                "--seed",
                "17",
                "--suppress-health-check",
                "all",
                "--no-color",
            ]
            result = subprocess.run(command, cwd=deployment.data_dir)
            failed |= result.returncode != 0
        log = server.output()
        if "Traceback" in log:
            print("== the server logged a traceback:\n" + log[-5000:])
            failed = True
        return 1 if failed else 0
    finally:
        deployment.close()


def _seed(url: str, agent_key: str, reviewer_key: str) -> None:
    """A few real actions, so ids the stateful phase links to exist."""
    agent = httpx.Client(base_url=url + "/api/v1", headers={"Authorization": f"Bearer {agent_key}"})
    body = {
        "kind": "payment.refund",
        "title": "Refund $84.00 on order 10432",
        "preview": {"format": "plain", "body": "Refund 84"},
        "payload": {"order_id": "10432", "amount_cents": 8400, "currency": "USD"},
        "editable": ["payload.amount_cents"],
    }
    for _ in range(3):
        agent.post("/actions", json=body).raise_for_status()


if __name__ == "__main__":
    sys.exit(main())
