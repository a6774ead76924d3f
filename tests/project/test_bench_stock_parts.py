"""bench/stock_parts.py's command line and table (a run takes minutes: it is not run here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.stock_parts import BEGIN, END, parse_args, render, write_docs


def result(**numbers: float) -> dict:
    return {"tree": "/t", "commit": "abc1234", "numbers": numbers}


def test_quick_shrinks_the_run_and_an_option_given_still_wins():
    full = parse_args(["--tree", "/a", "--tree", "/b/after"])
    quick = parse_args(["--tree", "/a", "--quick", "--timeout-s", "30"])

    assert (full.waiters, full.timeout_s, full.decision_rate) == (2000, 60, 20)
    assert full.label == ["a", "after"]
    assert (quick.waiters, quick.timeout_s, quick.push_seconds) == (200, 30, 4)


def test_it_wants_a_label_for_every_tree_or_none():
    with pytest.raises(SystemExit):
        parse_args(["--tree", "/a", "--tree", "/b", "--label", "before"])


def test_the_table_has_a_column_per_tree_and_says_which_budgets_are_met():
    before = result(create_p50_ms=5.0, creates_per_s=250, wake_p99_ms=300.0, lost=0)
    after = result(create_p50_ms=9.5, creates_per_s=120, wake_p99_ms=90.0, lost=2)

    table = render([before, after], ["before", "after"]).splitlines()

    assert table[0] == "| measure | before | after | budget |"
    assert "| create p50 at 1 client | 5.0 ms, met | 9.5 ms, **missed** | ≤ 8 ms |" in table
    assert "| creates a second at 16 clients | 250, met | 120, **missed** | ≥ 180 a second |" in (
        table
    )
    assert "| approve request → woken agent, p99 | 300.0 ms, **missed** | 90.0 ms, met" in (
        "\n".join(table)
    )
    assert "| wakes lost | 0, met | 2, **missed** | none |" in table
    assert "| memory per waiting agent (serve RSS) | – | – | ≤ 30 KB |" in table


def test_a_tree_that_failed_gets_its_column_and_says_why():
    failed = {
        "tree": "/b",
        "commit": "def5678",
        "error": "RuntimeError: serve exited",
        "numbers": {},
    }

    table = render([result(lost=0), failed], ["before", "after"]).splitlines()

    assert "| wakes lost | 0, met | – | none |" in table
    assert "| run failed | – | RuntimeError: serve exited | |" in table
    assert "run failed" not in render([result(lost=0)], ["before"])


def test_it_writes_between_the_markers_and_keeps_the_rest(tmp_path: Path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Head\n\n{BEGIN}\nold table\n{END}\n\n## Tail\n")

    write_docs(docs, "new table")

    assert docs.read_text() == f"# Head\n\n{BEGIN}\nnew table\n{END}\n\n## Tail\n"


def test_it_refuses_a_file_without_the_markers(tmp_path: Path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# no markers\n")

    with pytest.raises(SystemExit):
        write_docs(docs, "table")
