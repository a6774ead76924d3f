"""Run the refund agent against a local Impri: ``python -m examples.refund_agent``.

Needs IMPRI_API_KEY (an agent key: ``impri createagent support-bot``) and,
unless Impri is at http://127.0.0.1:8000, IMPRI_URL. Starts the stand-in
payment processor on a free loopback port, handles every ticket in
tickets.json, and prints one JSON line per ticket as its outcome is known.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from impri_client import Impri

from .agent import TICKETS, load_tickets, run
from .processor import Processor, impri_jwks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.refund_agent")
    parser.add_argument("--url", default=os.environ.get("IMPRI_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--tickets", type=Path, default=TICKETS)
    parser.add_argument(
        "--processor-url", help="use a processor already running instead of starting one"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=None, help="stop waiting for reviewers after this"
    )
    args = parser.parse_args(argv)
    if not os.environ.get("IMPRI_API_KEY"):
        print("set IMPRI_API_KEY to an agent key (impri createagent support-bot)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with Impri(args.url) as impri:
        processor = None if args.processor_url else Processor(impri_jwks(impri))
        processor_url = args.processor_url or processor.serve()
        print(f"payment processor at {processor_url}", file=sys.stderr)
        print(f"waiting for decisions: open {args.url}/inbox/", file=sys.stderr)
        try:
            outcomes = run(impri, processor_url, load_tickets(args.tickets), args.timeout_s)
        finally:
            if processor:
                processor.close()
    summary = {"outcomes": outcomes}
    if processor:
        summary["processor"] = {"refunds": processor.refunds, "refused": processor.refusals}
    print(json.dumps(summary, indent=2))
    return 0 if all(o["outcome"] != "refused by the processor" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
