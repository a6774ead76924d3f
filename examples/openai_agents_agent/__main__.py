"""Run the OpenAI Agents SDK support agent against Impri: ``python -m examples.openai_agents_agent``.

Needs IMPRI_API_KEY (an agent key) and, unless Impri is at http://127.0.0.1:8000, IMPRI_URL.
Every ticket of examples/refund_agent/tickets.json is one agent run, all waiting at once;
decide them in the inbox. Without OPENAI_API_KEY a scripted model plays the LLM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from impri_client import AsyncImpri, Impri

from examples.refund_agent.agent import load_tickets
from examples.refund_agent.processor import Processor, impri_jwks

from .agent import handle


async def run(url: str, timeout_s: float | None) -> list[dict]:
    with Impri(url) as sync_impri:
        processor = Processor(impri_jwks(sync_impri))
        processor_url = processor.serve()
        print(f"waiting for decisions: open {url}/inbox/", file=sys.stderr)
        try:
            async with AsyncImpri(url) as impri:
                tickets = load_tickets()
                return await asyncio.gather(
                    *(handle(impri, processor_url, t, timeout_s) for t in tickets)
                )
        finally:
            processor.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.openai_agents_agent")
    parser.add_argument("--url", default=os.environ.get("IMPRI_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--timeout-s", type=float, default=None, help="stop waiting after this")
    args = parser.parse_args(argv)
    if not os.environ.get("IMPRI_API_KEY"):
        print("set IMPRI_API_KEY to an agent key (impri createagent support-bot)", file=sys.stderr)
        return 2
    outcomes = asyncio.run(run(args.url, args.timeout_s))
    print(json.dumps({"outcomes": outcomes}, indent=2))
    return 0 if all(o["outcome"] != "refused by the processor" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
