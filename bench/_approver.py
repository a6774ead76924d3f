"""The reviewer of ``bench/waiters.py --approver-process``: approvals from a process of its own.

    python bench/_approver.py JOBS.json RESULT.json

``JOBS.json`` holds ``{"token", "rate", "approvers", "jobs": [[url, action_id], ...]}``.
The n-th approval is sent at n / rate seconds after the start (``rate`` 0: as fast as
``approvers`` concurrent requests go), each ``POST {url}/api/v1/actions/{id}/approve``
with the reviewer's token. ``RESULT.json`` gets, per action, the ``time.time()`` just
before the request was written and when its answer came back, and the status.

A process of its own, as a reviewer's browser or a second service is: the approvals'
HTTP client then never shares an event loop (or a core's time slice) with the thousands
of waits it is meant to wake, so a late approve request is the server's doing.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import httpx


class Pace:
    """Paced like a team of reviewers: the n-th ``turn()`` ends n / rate seconds after
    ``start()`` (rate 0: at once)."""

    def __init__(self, rate: float):
        self.rate, self.issued, self.started = rate, 0, time.monotonic()

    def start(self) -> None:
        self.started = time.monotonic()

    async def turn(self) -> None:
        if self.rate:
            due = self.started + self.issued / self.rate
            self.issued += 1
            await asyncio.sleep(max(0.0, due - time.monotonic()))


async def approve_all(spec: dict) -> dict:
    queue: asyncio.Queue = asyncio.Queue()
    for job in spec["jobs"]:
        queue.put_nowait(job)
    pace, concurrency = Pace(spec["rate"]), spec["approvers"]
    headers = {"Authorization": f"Bearer {spec['token']}"}
    results: dict[str, list] = {}
    limits = httpx.Limits(
        max_connections=concurrency + 5, max_keepalive_connections=concurrency + 5
    )

    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(120, connect=30)) as client:

        async def approver() -> None:
            while not queue.empty():
                url, action_id = queue.get_nowait()
                await pace.turn()
                sent = time.time()
                try:
                    response = await client.post(
                        f"{url}/api/v1/actions/{action_id}/approve",
                        json={"note": "bench"},
                        headers=headers,
                    )
                    status = response.status_code
                except Exception as exc:
                    status = type(exc).__name__
                results[action_id] = [sent, time.time(), status]

        # Open the connections before the clock starts, so the first approvals don't pay for it.
        await asyncio.gather(
            *(
                client.get(url + "/healthz")
                for url in {u for u, _ in spec["jobs"]}
                for _ in range(concurrency)
            )
        )
        pace.start()
        await asyncio.gather(*(approver() for _ in range(concurrency)))
    return results


async def in_a_process(workdir: Path, spec: dict) -> dict:
    """Run this script as a child on ``spec`` (files in ``workdir``): the results by action id.

    Raises RuntimeError when the child fails; a cancelled wait kills it.
    """
    jobs, results = workdir / "approve-jobs.json", workdir / "approve-results.json"
    jobs.write_text(json.dumps(spec))
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).resolve()), str(jobs), str(results)
    )
    try:
        await child.wait()
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    if child.returncode:
        raise RuntimeError(f"approver exited {child.returncode}")
    return json.loads(results.read_text())


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    results = asyncio.run(approve_all(spec))
    with open(sys.argv[2], "w") as out:
        json.dump(results, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
