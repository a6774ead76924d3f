"""The single door: nothing outside ``approvals/services/`` writes an action's state.

The scan reads the source of every application module (AST, not imports, so a
module nobody imports in the tests is checked too) and fails on:

- a write through ``Action``'s manager (``Action.objects….update()``, ``.create()``,
  ``.delete()``, ``bulk_update()`` …), directly or through a name bound to such a
  queryset;
- ``.save()``, ``.delete()``, ``.update()`` … on something named like an action
  (``action``, ``self.action``, ``existing_action``, ``agent.actions``);
- an assignment to an action's state field (``action.status = …``, ``decided_at``, …);
- constructing an ``Action(…)``;
- raw SQL that changes the ``approvals_action`` table.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.source import ROOT, application_modules

THE_DOOR = ROOT / "approvals" / "services"

WRITES = {
    "save",
    "delete",
    "update",
    "bulk_update",
    "bulk_create",
    "create",
    "get_or_create",
    "update_or_create",
    "asave",
    "adelete",
    "aupdate",
    "abulk_update",
    "abulk_create",
    "acreate",
    "aget_or_create",
    "aupdate_or_create",
}
# An action's state: its status and everything a transition writes.
STATE_FIELDS = {
    "status",
    "payload",
    "edited_by_human",
    "decided_by_user",
    "decided_by_user_id",
    "decided_by_rule",
    "decided_at",
    "note",
    "reject_reason",
    "result_status",
    "result_detail",
    "reported_at",
    "review_group",
    "review_group_id",
    "escalate_at",
    "last_reminded_at",
    "stale_flagged_at",
    "expires_at",
}
ACTION_NAME = re.compile(r"^(\w+_)?actions?$")
RAW_SQL = re.compile(
    r"\b(update|insert\s+into|delete\s+from)\s+[\"'`]?approvals_action[\"'`]?(\s|$)", re.I
)


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _mentions_action_manager(node: ast.AST) -> bool:
    return any(
        isinstance(sub, ast.Attribute)
        and sub.attr in ("objects", "_default_manager", "_base_manager")
        and isinstance(sub.value, ast.Name)
        and sub.value.id == "Action"
        for sub in ast.walk(node)
    )


def offences(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for every write of an action's state in ``source``."""
    tree = ast.parse(source)
    querysets: set[str] = set()  # names bound to an Action queryset, anywhere in the module
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and node.value is not None
            and _mentions_action_manager(node.value)
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            querysets |= {t.id for t in targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "Action":
                found.append((node.lineno, "constructs an Action"))
            elif isinstance(func, ast.Attribute) and func.attr in WRITES:
                receiver = func.value
                name = _last_name(receiver)
                if (
                    _mentions_action_manager(receiver)
                    or any(
                        isinstance(sub, ast.Name) and sub.id in querysets
                        for sub in ast.walk(receiver)
                    )
                    or (name is not None and ACTION_NAME.match(name))
                ):
                    found.append((node.lineno, f"{ast.unparse(func)}()"))
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if (
                        isinstance(sub, ast.Attribute)
                        and sub.attr in STATE_FIELDS
                        and ACTION_NAME.match(_last_name(sub.value) or "")
                    ):
                        found.append((node.lineno, f"assigns {ast.unparse(sub)}"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and RAW_SQL.search(node.value)
        ):
            found.append((node.lineno, "raw SQL writing approvals_action"))
    return sorted(set(found))


def test_nothing_outside_the_services_package_writes_an_action():
    modules = application_modules()
    outside = [path for path in modules if THE_DOOR not in path.parents]
    assert len(outside) > 50 and len(outside) < len(modules)  # the scan sees both sides
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in outside
        for line, what in offences(path.read_text(encoding="utf-8"))
    ]
    assert not problems, (
        "an action's state is written outside approvals/services/ (move it into the package):\n"
        + "\n".join(problems)
    )


def test_the_services_package_is_where_the_writes_are():
    """The scan recognises the writes the door itself makes, so it can see one elsewhere."""
    inside = [path for path in application_modules() if THE_DOOR in path.parents]
    found = {path.name: offences(path.read_text(encoding="utf-8")) for path in inside}
    for module in ("pushing.py", "deciding.py", "reporting.py", "sweeps.py"):
        assert found[module], f"the scan finds no write in approvals/services/{module}"


@pytest.mark.parametrize(
    "source",
    [
        "Action.objects.filter(pk=1).update(status='approved')",
        "due = Action.objects.filter(status='pending')\nfor a in due: pass\ndue.update(note='x')",
        "action.save()",
        "self.action.save(update_fields=['status'])",
        "action.status = 'approved'",
        "existing_action.decided_at = now",
        "agent.actions.update(status='cancelled')",
        "Action(kind='x').save()",
        "Action.objects.create(kind='x')",
        "cursor.execute('UPDATE approvals_action SET status = %s', ['approved'])",
        "Action._default_manager.filter(pk=1).delete()",
    ],
)
def test_the_scan_catches_a_write(source):
    assert offences(source)


@pytest.mark.parametrize(
    "source",
    [
        "Action.objects.filter(status='pending').count()",
        "action = services.decide(pk, by=user, verdict='approve')",
        "row.status = 'sent'\nrow.save()",
        "delivery.update(status='failed')",
        "print(action.status)",
        "cursor.execute('SELECT * FROM approvals_action')",
    ],
)
def test_the_scan_lets_reads_and_other_models_be(source):
    assert not offences(source)
