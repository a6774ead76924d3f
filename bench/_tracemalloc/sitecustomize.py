"""Bench-only: run an Impri serve process under ``tracemalloc`` (``bench/wait_memory.py``).

Loaded through ``PYTHONPATH`` when ``IMPRI_BENCH_TRACEMALLOC`` is set (the frames kept
per allocation). The first SIGUSR1 takes a snapshot after a full collection; the second
takes another and writes what grew in between, by the line that allocated it, to
``$IMPRI_DATA_DIR/tracemalloc-<pid>.txt``: its first line is ``total <MB>``, the growth
in MB. Other processes (``impri migrate``, ``impri shell``, worker, beat) are left alone:
only ``serve`` installs the handler. Never shipped.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import tracemalloc

_FRAMES = os.environ.get("IMPRI_BENCH_TRACEMALLOC")
_snapshots: list = []


def _snapshot(signum, frame) -> None:
    gc.collect()
    _snapshots.append(tracemalloc.take_snapshot())
    if len(_snapshots) < 2:
        return
    first, second = _snapshots[-2:]
    stats = second.compare_to(first, "traceback")
    total = sum(stat.size_diff for stat in stats)
    lines = [f"total {total / 2**20:.3f} MB"]
    for stat in stats[:40]:
        lines.append(f"{stat.size_diff / 1024:10.1f} KB {stat.count_diff:+8d} objects")
        lines.extend("      " + line for line in stat.traceback.format()[-2 * int(_FRAMES) :])
    path = os.path.join(os.environ.get("IMPRI_DATA_DIR", "."), f"tracemalloc-{os.getpid()}.txt")
    with open(path + ".tmp", "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


if _FRAMES and "serve" in sys.argv:
    tracemalloc.start(int(_FRAMES))
    signal.signal(signal.SIGUSR1, _snapshot)
