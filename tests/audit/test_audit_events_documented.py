"""The audit event table in docs/audit.md and the events the code appends are the same set.

The code side is read statically: every call of ``record`` (``audit.log.record``) and of
every function that hands one of its own parameters on as the event (``_record``,
``_membership_changed``..., found by the scan itself). An event argument must be something
the scan can resolve: a literal, a conditional of those, a module constant, a loop variable
over a module-level table of names, or an f-string ``action.{status}`` (an action status).
Anything else fails the scan, so a new call site can't slip past both directions.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from approvals.models import ActionStatus
from tests.source import application_trees

ROOT = Path(__file__).resolve().parents[2]
APP_DIRS = tuple(name for name in application_trees() if name not in ("clients", "examples"))
EVENT = re.compile(r"[a-z_]+\.[a-z_.]+")
FUNCTIONS = ast.FunctionDef | ast.AsyncFunctionDef


def documented(text: str | None = None) -> set[str]:
    """Event names in the first cell of the table rows of docs/audit.md."""
    if text is None:
        text = (ROOT / "docs/audit.md").read_text()
    events = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            events |= set(re.findall(r"`([a-z_]+\.[a-z_.]+)`", first_cell))
    return events


def application_sources() -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text()
        for folder in APP_DIRS
        for path in (ROOT / folder).rglob("*.py")
        if "migrations" not in path.parts
    }


class _Module:
    """One parsed module: its constants and, per function, the loop tables of its names."""

    def __init__(self, where: str, source: str):
        self.where = where
        self.tree = ast.parse(source)
        self.constants: dict[str, ast.expr] = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.constants[target.id] = node.value

    def functions(self):
        return [node for node in ast.walk(self.tree) if isinstance(node, FUNCTIONS)]

    def loop_table(self, function, name: str) -> ast.expr | None:
        """The module-level table a ``for`` loop of ``function`` binds ``name`` from."""
        for node in ast.walk(function):
            if not isinstance(node, ast.For):
                continue
            if name not in {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}:
                continue
            source = node.iter
            if isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute):
                source = source.func.value  # TABLE.items() / TABLE.values()
            if isinstance(source, ast.Name) and source.id in self.constants:
                table = self.constants[source.id]
                if isinstance(table, ast.Dict):
                    return ast.Tuple(elts=list(table.values), ctx=ast.Load())
                return table
        return None


def _resolve(module: _Module, function, node) -> tuple[set[str], set[str], bool]:
    """(names, f-string patterns, resolved) an event argument can take."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}, set(), True
    if isinstance(node, ast.IfExp):
        a = _resolve(module, function, node.body)
        b = _resolve(module, function, node.orelse)
        return a[0] | b[0], a[1] | b[1], a[2] and b[2]
    if isinstance(node, ast.JoinedStr):
        pattern = "".join(
            re.escape(part.value) if isinstance(part, ast.Constant) else "{}"
            for part in node.values
        )
        return set(), {pattern}, True
    if isinstance(node, ast.Name):
        value = module.constants.get(node.id)
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return {value.value}, set(), True
        table = module.loop_table(function, node.id) if function is not None else None
        if table is not None:
            names = {
                leaf.value
                for leaf in ast.walk(table)
                if isinstance(leaf, ast.Constant)
                and isinstance(leaf.value, str)
                and EVENT.fullmatch(leaf.value)
            }
            return names, set(), bool(names)
    return set(), set(), False


def _own_nodes(scope):
    """``scope`` and its nodes, without those of the functions defined inside it."""
    stack = [scope]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, FUNCTIONS))


def scan(sources: dict[str, str]) -> tuple[set[str], set[str], list[str]]:
    """(event names, f-string patterns, unresolved call sites) of ``sources``."""
    calls = []  # (module, enclosing function or None, its parameters, call), walked once
    for module in (_Module(where, source) for where, source in sources.items()):
        scopes = [(None, node) for node in module.tree.body if not isinstance(node, FUNCTIONS)]
        scopes += [(function, function) for function in module.functions()]
        for function, scope in scopes:
            params = [a.arg for a in function.args.args] if function is not None else []
            calls += [
                (module, function, params, node)
                for node in _own_nodes(scope)
                if isinstance(node, ast.Call) and node.args
            ]
    recorders = {"record": 0}  # function name → position of its event parameter
    while True:
        names, patterns, unresolved, passing = set(), set(), [], {}
        for module, function, params, node in calls:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            position = recorders.get(called)
            if position is None or len(node.args) <= position:
                continue
            argument = node.args[position]
            if isinstance(argument, ast.Name) and argument.id in params:
                passing[function.name] = params.index(argument.id)
                continue
            found, found_patterns, ok = _resolve(module, function, argument)
            names |= found
            patterns |= found_patterns
            if not ok:
                unresolved.append(f"{module.where}:{node.lineno}: {ast.unparse(argument)}")
        if passing.items() <= recorders.items():
            return names, patterns, unresolved
        recorders |= passing


def expand(patterns: set[str]) -> set[str]:
    """The names an f-string can produce: its one placeholder is an action's status."""
    names = set()
    for pattern in patterns:
        assert pattern.count("{}") == 1, f"an event name the scan can't expand: {pattern}"
        names |= {re.sub(r"\\(.)", r"\1", pattern).format(s) for s in ActionStatus.values}
    return names


@functools.cache
def emitted() -> tuple[frozenset[str], frozenset[str]]:
    """(literal event names, f-string patterns) the application code appends."""
    names, patterns, unresolved = scan(application_sources())
    assert unresolved == [], "event names the scan can't resolve:\n" + "\n".join(unresolved)
    return frozenset(names), frozenset(patterns)


def test_the_scan_resolves_every_way_the_code_names_an_event():
    sample = """
from audit import log

KINDS = {"is_on": ("thing.switched_on", "thing.switched_off")}
RESET = "thing.reset"

def _note(event, data):
    with transaction.atomic():
        log.record(event, actor_type="system", actor_id="x", data=data)

def _note_twice(data, event):
    _note(event, data)

def flip(instance, status):
    for flag, (on, off) in KINDS.items():
        _note(on if getattr(instance, flag) else off, {})
    _note_twice({}, RESET)
    log.record(f"thing.{status}", actor_type="system", actor_id="x")
    _note("thing.literal" if status else "thing.other", {})
    _note(instance.event_name, {})
"""
    names, patterns, unresolved = scan({"sample.py": sample})
    assert names == {
        "thing.switched_on",
        "thing.switched_off",
        "thing.reset",
        "thing.literal",
        "thing.other",
    }
    assert patterns == {r"thing\.{}"}
    assert unresolved == ["sample.py:20: instance.event_name"]


def test_the_scan_finds_the_applications_events():
    names, patterns = emitted()
    # Literals, a flag table (USER_FLAGS), a helper's parameter (_membership_changed).
    assert {
        "action.pushed",
        "result.reported",
        "reviewer.login",
        "user.superuser_granted",
        "user.groups_changed",
    } <= names
    assert r"action\.{}" in patterns


def test_every_event_the_code_appends_is_documented():
    names, _ = emitted()
    assert sorted(names - documented()) == []


def test_every_documented_event_is_appended_by_the_code():
    names, patterns = emitted()
    assert sorted(documented() - names - expand(patterns)) == []


def test_both_directions_can_fail():
    table = (ROOT / "docs/audit.md").read_text()
    names, patterns = emitted()
    # An event dropped from the table is an undocumented event...
    dropped = table.replace("| `reviewer.locked_out` |", "| locked out |")
    assert names - documented(dropped) == {"reviewer.locked_out"}
    # ...and an event the code never appends is an orphan, even one shaped like a status.
    extra = table + "\n| `action.vanished`, `action.executed_twice` | system | nothing |\n"
    assert documented(extra) - names - expand(patterns) == {
        "action.vanished",
        "action.executed_twice",
    }
