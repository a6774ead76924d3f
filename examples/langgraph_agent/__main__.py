"""Run the LangGraph support agent against Impri: ``python -m examples.langgraph_agent``.

Needs IMPRI_API_KEY (an agent key) and, unless Impri is at http://127.0.0.1:8000, IMPRI_URL.
Every ticket of examples/refund_agent/tickets.json is a graph thread paused at its review;
decide them in the inbox. Without OPENAI_API_KEY a scripted model plays the LLM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from impri_client import Impri

from examples.refund_agent.agent import load_tickets
from examples.refund_agent.processor import Processor, impri_jwks

from .agent import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.langgraph_agent")
    parser.add_argument("--url", default=os.environ.get("IMPRI_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--timeout-s", type=float, default=None, help="stop waiting after this")
    args = parser.parse_args(argv)
    if not os.environ.get("IMPRI_API_KEY"):
        print("set IMPRI_API_KEY to an agent key (impri createagent support-bot)", file=sys.stderr)
        return 2
    with Impri(args.url) as impri:
        processor = Processor(impri_jwks(impri))
        processor_url = processor.serve()
        print(f"waiting for decisions: open {args.url}/inbox/", file=sys.stderr)
        try:
            outcomes = run(impri, processor_url, load_tickets(), args.timeout_s)
        finally:
            processor.close()
    print(json.dumps({"outcomes": outcomes}, indent=2))
    return 0 if all(o["outcome"] != "refused by the processor" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
