"""``impri-agent``: Impri from a shell script or a cron job, JSON in and out.

    export IMPRI_URL=http://127.0.0.1:8000 IMPRI_API_KEY=imp_a_...
    id=$(echo '{"kind": "payment.refund", ...}' | impri-agent push | jq -r .action_id)
    if impri-agent await "$id" > decision.json; then
        ... execute with: jq .payload decision.json ...
        impri-agent report "$id" --status executed --detail '{"txn": "re_123"}'
    fi

Exit status: 0 success (for ``await``: approved), 3 ``await`` answered a
decision other than approved (rejected, expired, cancelled, already
reported), 4 ``await`` still pending at ``--timeout-s``, 1 Impri refused the
request (the error is printed as JSON on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import httpx

from .client import Impri
from .errors import ApiError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_APPROVED, EXIT_PENDING = 0, 1, 2, 3, 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="impri-agent",
        description="Push actions to Impri, await decisions, report results (JSON in and out). "
        "Key from IMPRI_API_KEY, server from IMPRI_URL.",
    )
    parser.add_argument("--url", default=os.environ.get("IMPRI_URL", "http://127.0.0.1:8000"))
    commands = parser.add_subparsers(dest="command", required=True)

    push = commands.add_parser("push", help="push an action: its REST fields as a JSON object")
    push.add_argument("json", nargs="?", default="-", help="the JSON, or - (default) for stdin")

    wait = commands.add_parser("await", help="wait for the decision (exit 0 only if approved)")
    wait.add_argument("action_id")
    wait.add_argument("--timeout-s", type=float, default=None, help="give up after this (exit 4)")

    report = commands.add_parser("report", help="report executed/failed")
    report.add_argument("action_id")
    report.add_argument("--status", choices=("executed", "failed"))
    report.add_argument("--detail", help="text, or a JSON object")
    report.add_argument("--grant", help="the grant the decision carried")
    report.add_argument("--json", help="the whole report as JSON, or - for stdin")

    get = commands.add_parser("get", help="read an action")
    get.add_argument("action_id")

    cancel = commands.add_parser("cancel", help="withdraw a pending action")
    cancel.add_argument("action_id")
    cancel.add_argument("--reason", default="")
    return parser


def _json_argument(text: str) -> Any:
    raw = sys.stdin.read() if text == "-" else text
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise SystemExit(_usage(f"not JSON: {exc}")) from None


def _usage(message: str) -> int:
    print(json.dumps({"error": "usage", "detail": message}), file=sys.stderr)
    return EXIT_USAGE


def _detail(text: str | None) -> Any:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _run(client: Impri, args: argparse.Namespace) -> tuple[dict, int]:
    if args.command == "push":
        fields = _json_argument(args.json)
        if not isinstance(fields, dict):
            raise SystemExit(_usage("push takes a JSON object"))
        return _push(client, fields).raw, EXIT_OK
    if args.command == "await":
        decision = client.await_decision(args.action_id, args.timeout_s)
        code = (
            EXIT_OK
            if decision.approved
            else EXIT_PENDING
            if decision.pending
            else EXIT_NOT_APPROVED
        )
        return decision.raw, code
    if args.command == "report":
        body = _json_argument(args.json) if args.json else {}
        status = args.status or body.get("status")
        if status is None:
            raise SystemExit(_usage("report needs --status executed|failed"))
        detail = _detail(args.detail) if args.detail is not None else body.get("detail")
        grant = args.grant or body.get("grant")
        action = client.report_result(args.action_id, status=status, detail=detail, grant=grant)
        return action.raw, EXIT_OK
    if args.command == "cancel":
        return client.cancel(args.action_id, reason=args.reason).raw, EXIT_OK
    return client.get(args.action_id).raw, EXIT_OK


def _push(client: Impri, fields: dict):
    missing = [name for name in ("kind", "title", "preview", "payload") if name not in fields]
    if missing:
        raise SystemExit(_usage(f"push needs {', '.join(missing)}"))
    return client.push(**fields)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not os.environ.get("IMPRI_API_KEY"):
        return _usage("set IMPRI_API_KEY to the agent's key (impri createagent)")
    try:
        with Impri(args.url) as client:
            body, code = _run(client, args)
    except ApiError as exc:
        error = {"error": type(exc).__name__, "status": exc.status_code, **exc.body}
        print(json.dumps(error, ensure_ascii=False), file=sys.stderr)
        return EXIT_ERROR
    except httpx.HTTPError as exc:
        print(json.dumps({"error": type(exc).__name__, "detail": str(exc)}), file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(body, ensure_ascii=False))
    return code


if __name__ == "__main__":
    sys.exit(main())
