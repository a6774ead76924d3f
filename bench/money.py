"""What reading and checking an action's money adds to a push (not a test).

    python bench/money.py            # microseconds per push, declared and undeclared kinds

In process, no server: the push's own money work, as ``approvals.services.pushing`` does
it (I-JSON check, the kind's schema and money validated, the amounts read for the edit
bounds and the amount columns), timed with ``timeit`` over ``--n`` pushes of the seed's
refund payload: once as ``payment.refund`` (declared by default), once as an undeclared
kind read by the detector. Results: docs/benchmarks.md, "What money adds to a push".
"""

from __future__ import annotations

import argparse
import timeit

from rules import kinds, money

PAYLOAD = {"order_id": "10432", "amount_cents": 8400, "currency": "USD", "reason": "damaged"}


def declared() -> None:
    spec = kinds.DEFAULT_KINDS["payment.refund"]
    money.ijson_problem(PAYLOAD, "payload")
    kinds.payload_problems(spec, PAYLOAD)
    specs = list(spec.money)
    _ = {a.path: a.sign for a in money.amounts({"payload": PAYLOAD}, specs)}
    money.largest(money.amounts({"payload": PAYLOAD}, specs))


def undeclared() -> None:
    money.ijson_problem(PAYLOAD, "payload")
    _ = {a.path: a.sign for a in money.amounts({"payload": PAYLOAD}, None)}
    money.largest(money.amounts({"payload": PAYLOAD}, None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000, help="pushes timed per case")
    n = parser.parse_args().n
    for name, case in (
        ("declared (payment.refund)", declared),
        ("undeclared (detector)", undeclared),
    ):
        case()  # warm the detector's key cache, as a running server has it
        best = min(timeit.repeat(case, number=n, repeat=5)) / n
        print(f"{name}: {best * 1e6:.1f} us a push")


if __name__ == "__main__":
    main()
