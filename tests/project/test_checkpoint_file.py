"""`impri audit verify --checkpoints FILE` names a bad line of the file instead of "BROKEN at #None"."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from audit import log


def verify(path) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("audit", "verify", "--checkpoints", str(path), stdout=out, stderr=err)
        code = 0
    except SystemExit as exit:
        code = exit.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def pins(agent, tmp_path):
    """A file holding one good checkpoint (the agent's key made some events)."""
    path = tmp_path / "checkpoints.jsonl"
    path.write_text(json.dumps(log.make_checkpoint()) + "\n")
    return path


def test_a_good_file_holds(pins):
    code, out, _ = verify(pins)
    assert code == 0 and out.startswith("ok: ") and "1 checkpoint(s) hold" in out


@pytest.mark.parametrize(
    "line",
    [
        "{}",
        "42",
        '"text"',
        "[1, 2]",
        '{"seq": "7", "hash": "h", "at": "t", "signature": "s"}',
        '{"seq": true, "hash": "h", "at": "t", "signature": "s"}',
    ],
    ids=["empty object", "a number", "a string", "a list", "seq as text", "seq as a boolean"],
)
def test_a_line_that_is_not_a_checkpoint_is_named(pins, line):
    pins.write_text(pins.read_text() + "\n" + line + "\n")
    with pytest.raises(CommandError) as refused:
        verify(pins)
    assert str(refused.value) == (
        f"{pins}, line 3: not a checkpoint: expected a JSON object {{seq, hash, at, signature}} "
        "as `impri audit checkpoint` writes"
    )
    assert "None" not in str(refused.value)


def test_a_line_that_is_not_json_is_named(pins):
    pins.write_text('{"seq": 1,\n')
    with pytest.raises(CommandError, match=rf"^{pins}, line 1: not JSON \("):
        verify(pins)


def test_a_checkpoint_signed_with_another_key_is_a_verdict_naming_the_line(pins):
    forged = {**json.loads(pins.read_text()), "signature": "0" * 64}
    pins.write_text(pins.read_text() + json.dumps(forged) + "\n")
    code, out, err = verify(pins)
    assert code == 1 and out == ""
    assert err.startswith(
        f"BROKEN: {pins}, line 2: the checkpoint at #{forged['seq']} is not signed"
    )
    assert "#None" not in err
