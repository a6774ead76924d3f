"""The single door: nothing outside ``approvals/services/`` writes an action's state.

Two checks, because neither alone sees every spelling.

The scan reads the source of every application module (AST, not imports, so a
module nobody imports in the tests is checked too) and fails on:

- a write through ``Action``'s manager (``Action.objects….update()``, ``.create()``,
  ``.delete()``, ``bulk_update()`` …), directly, through a name bound to such a
  queryset, or through another name for the model (``import Action as A``,
  ``apps.get_model("approvals", "Action")``);
- ``.save()``, ``.delete()``, ``.update()`` … on something named like an action
  (``action``, ``self.action``, ``existing_action``, ``agent.actions``), or a helper
  handed one to write (``rows.insert(action)``, ``bulk_create([action])``);
- an assignment to an action's state field (``action.status = …``, ``decided_at``, …,
  ``setattr(action, "status", …)``);
- constructing an ``Action(…)``;
- SQL that changes the action table, however the string is built: a literal, an
  f-string or a concatenation naming ``Action._meta.db_table`` (or a name bound to it),
  ``str.format``.

The watch runs the interfaces (REST, the inbox, the sweeps) and records, below Django,
every statement that writes the ``status`` column of the action table or inserts an
action, with the first frame of our code that issued it: that frame must be in
``approvals/services/``. It sees what no scan can: a status written through a queryset
passed in from elsewhere, a helper of any name, a string built at run time.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

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
# Helpers that write what they are handed (``rows.insert(action)`` was one).
HANDED_WRITES = WRITES | {"insert", "insert_row", "write"}
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
ACTION_TABLE = "approvals_action"
RAW_SQL = re.compile(
    rf"\b(update|insert\s+(or\s+\w+\s+)?into|delete\s+from|replace\s+into)\s+"
    rf"[\"'`]?{ACTION_TABLE}[\"'`]?(\s|$)",
    re.I,
)


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _Module:
    """What a module calls the Action model, its table and its Action querysets."""

    def __init__(self, tree: ast.AST):
        self.models = {"Action"}
        self.tables: set[str] = set()
        self.querysets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                self.models |= {a.asname for a in node.names if a.name == "Action" and a.asname}
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                if _is_get_model(node.value):
                    self.models |= names
        # Second pass: names bound to a queryset or the table of any name of the model.
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                if self.mentions_manager(node.value):
                    self.querysets |= names
                if self.mentions_table(node.value):
                    self.tables |= names

    def mentions_manager(self, node: ast.AST) -> bool:
        return any(
            isinstance(sub, ast.Attribute)
            and sub.attr in ("objects", "_default_manager", "_base_manager")
            and isinstance(sub.value, ast.Name)
            and sub.value.id in self.models
            for sub in ast.walk(node)
        )

    def mentions_table(self, node: ast.AST) -> bool:
        names = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}
        attrs = {sub.attr for sub in ast.walk(node) if isinstance(sub, ast.Attribute)}
        return bool(names & self.models and "db_table" in attrs) or bool(names & self.tables)

    def sql_text(self, node: ast.AST) -> str | None:
        """The statement a string expression builds, the action table's name filled in."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(
                self.sql_text(part) or ""
                if isinstance(part, ast.Constant)
                else self._hole(part.value)
                for part in node.values
            )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
            left = self.sql_text(node.left)
            if left is None:
                return None
            return left + (self.sql_text(node.right) or self._hole(node.right))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
        ):
            template = self.sql_text(node.func.value)
            if template is None:
                return None
            holes = [*node.args, *(k.value for k in node.keywords)]
            table = any(self.mentions_table(h) for h in holes)
            return re.sub(r"\{[^{}]*\}", ACTION_TABLE if table else "?", template)
        return None

    def _hole(self, node: ast.AST) -> str:
        return ACTION_TABLE if self.mentions_table(node) else "?"


def _is_get_model(node: ast.AST) -> bool:
    """``apps.get_model("approvals", "Action")`` or ``get_model("approvals.Action")``."""
    return (
        isinstance(node, ast.Call)
        and _last_name(node.func) == "get_model"
        and any(
            isinstance(a, ast.Constant) and str(a.value).split(".")[-1] == "Action"
            for a in node.args
        )
    )


def _is_an_action(node: ast.AST) -> bool:
    """``action``, ``self.action``, or a list of them: what a helper is handed to write."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return any(_is_an_action(element) for element in node.elts)
    return isinstance(node, ast.Name | ast.Attribute) and bool(
        ACTION_NAME.match(_last_name(node) or "")
    )


def _call_offence(module: _Module, node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name) and func.id in module.models:
        return "constructs an Action"
    if _last_name(func) == "setattr" and len(node.args) >= 2:
        target, field = node.args[0], node.args[1]
        if (
            ACTION_NAME.match(_last_name(target) or "")
            and isinstance(field, ast.Constant)
            and field.value in STATE_FIELDS
        ):
            return f"{ast.unparse(node)}"
    if not isinstance(func, ast.Attribute):
        return None
    receiver = func.value
    if func.attr in WRITES and (
        module.mentions_manager(receiver)
        or any(
            isinstance(sub, ast.Name) and sub.id in module.querysets for sub in ast.walk(receiver)
        )
        or ACTION_NAME.match(_last_name(receiver) or "")
    ):
        return f"{ast.unparse(func)}()"
    if func.attr in HANDED_WRITES and any(_is_an_action(arg) for arg in node.args):
        return f"{ast.unparse(func)}() handed an action"
    return None


def offences(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for every write of an action's state in ``source``."""
    tree = ast.parse(source)
    module = _Module(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            what = _call_offence(module, node)
            if what:
                found.append((node.lineno, what))
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
        text = module.sql_text(node) if isinstance(node, ast.expr) else None
        if text and RAW_SQL.search(" ".join(text.split())):
            found.append((node.lineno, "SQL writing the action table"))
    return sorted(set(found))


def problems(paths: list[Path]) -> list[str]:
    return [
        f"{path.relative_to(ROOT) if ROOT in path.parents else path}:{line}: {what}"
        for path in paths
        for line, what in offences(path.read_text(encoding="utf-8"))
    ]


def test_nothing_outside_the_services_package_writes_an_action():
    modules = application_modules()
    outside = [path for path in modules if THE_DOOR not in path.parents]
    assert len(outside) > 50 and len(outside) < len(modules)  # the scan sees both sides
    found = problems(outside)
    assert not found, (
        "an action's state is written outside approvals/services/ (move it into the package):\n"
        + "\n".join(found)
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
        # What the old approvals/rows.py and the push's hand-written SQL looked like: unseen before.
        "rows.insert(action)",
        "Action.objects.bulk_create([action])",
        "cursor.execute(f'UPDATE {quote(Action._meta.db_table)} SET status = %s', ['x'])",
        "table = Action._meta.db_table\ncursor.execute('UPDATE ' + table + ' SET status = 1')",
        "sql = 'DELETE FROM {} WHERE id = %s'.format(quote(Action._meta.db_table))",
        "cursor.execute('''\n  update approvals_action\n  set status = %s''', ['x'])",
        "from approvals.models import Action as A\nA.objects.filter(pk=1).update(status='x')",
        "Model = apps.get_model('approvals', 'Action')\nModel.objects.update(status='x')",
        "setattr(action, 'status', 'approved')",
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
        "cursor.execute(f'UPDATE {quote(Delivery._meta.db_table)} SET status = %s', ['x'])",
        "cursor.execute(f'SELECT status FROM {quote(Action._meta.db_table)}')",
        "Notification.objects.create(action=action, channel='email')",
        "outbox.enqueue_notifications(action, group, 'new')",
        "setattr(row, 'status', 'sent')",
    ],
)
def test_the_scan_lets_reads_and_other_models_be(source):
    assert not offences(source)


PLANTED = """\
from approvals.models import Action


def settle(pk, cursor, quote):
    Action.objects.filter(pk=pk).update(status="approved")
    cursor.execute(f"UPDATE {quote(Action._meta.db_table)} SET status = 'approved'")
"""


def test_a_write_planted_in_a_module_outside_the_door_is_flagged(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    found = problems([planted])
    assert [line.split(":")[1] for line in found] == ["5", "6"], found


# --- The watch: the statements themselves, and who issued them ----------------------------

TABLE = r'[`"]?approvals_action[`"]?'
STATUS_UPDATE = re.compile(rf"^\s*UPDATE\s+{TABLE}\s+SET\s+(?P<set>.*?)(\sWHERE\s|$)", re.I | re.S)
STATUS_COLUMN = re.compile(r'(^|[\s,(])[`"]?status[`"]?\s*=', re.I)
ACTION_INSERT = re.compile(rf"^\s*INSERT\s+INTO\s+{TABLE}\s*\(", re.I)


def writes_status(sql: str) -> bool:
    """An UPDATE of the action table that sets ``status``, or an INSERT of an action."""
    update = STATUS_UPDATE.match(sql)
    return bool(update and STATUS_COLUMN.search(update["set"])) or bool(ACTION_INSERT.match(sql))


def _ours(filename: str) -> Path | None:
    """The file of a frame of our code (application, tests or a planted module), else None."""
    if filename.startswith("<"):
        return None
    path = Path(filename)
    libraries = {Path(sys.base_prefix), Path(sys.prefix)}
    if "site-packages" in path.parts or libraries & set(path.parents) or path == Path(__file__):
        return None
    return path


def _first_frame_of_ours() -> tuple[Path | None, int]:
    frame = sys._getframe(2)
    while frame is not None:
        path = _ours(frame.f_code.co_filename)
        if path is not None:
            return path, frame.f_lineno
        frame = frame.f_back
    return None, 0


class StatusWatch:
    """Every statement writing an action's status, with the first frame of our code behind it.

    Wraps ``CursorWrapper._execute`` and ``_executemany``: below every cursor Django
    hands out, on every thread and connection, raw SQL included.
    """

    def __init__(self):
        self.writes: list[tuple[Path | None, int, str]] = []

    def wrap(self, original):
        def execute(cursor, sql, *args, **kwargs):
            if isinstance(sql, str) and writes_status(sql):
                self.writes.append((*_first_frame_of_ours(), sql))
            return original(cursor, sql, *args, **kwargs)

        return execute

    def outside_the_door(self) -> list[str]:
        tests = ROOT / "tests"  # a test's own setup may write what it likes
        return [
            f"{path}:{line}: {sql[:120]}"
            for path, line, sql in self.writes
            if path is None or (THE_DOOR not in path.parents and tests not in path.parents)
        ]

    def from_the_door(self) -> int:
        return sum(1 for path, _, _ in self.writes if path and THE_DOOR in path.parents)


@pytest.fixture
def watch(monkeypatch):
    from django.db.backends.utils import CursorWrapper

    watching = StatusWatch()
    for name in ("_execute", "_executemany"):
        monkeypatch.setattr(CursorWrapper, name, watching.wrap(getattr(CursorWrapper, name)))
    return watching


@pytest.mark.django_db
def test_the_interfaces_write_status_only_through_the_door(watch, agent, rita):
    """Push (to review, auto-approved, auto-rejected), approve, report, reject in the inbox,
    request changes, cancel, expire: every status write comes from approvals/services/."""
    from datetime import timedelta

    from django.contrib.auth.models import Group
    from django.test import Client
    from django.utils import timezone

    from approvals import services
    from tests.factories import install_rules, refund

    install_rules()
    rita.user.groups.add(Group.objects.get(name="support-leads"))
    api, reviewer = agent.client(), rita.client()
    amounts = (1200, 2_000_000, 8400, 8500, 8600, 8700, 8800)
    pushed = [api.post("/actions", refund(amount)).json() for amount in amounts]
    assert [p["status"] for p in pushed[:3]] == ["approved", "rejected", "pending"], pushed
    approved, rejected, changed, cancelled, expired = (p["action_id"] for p in pushed[2:])
    edits = {"edits": {"payload.amount_cents": 5000}}
    assert reviewer.post(f"/actions/{approved}/approve", edits).status_code == 200
    assert api.post(f"/actions/{approved}/result", {"status": "executed"}).status_code == 200
    inbox = Client()
    inbox.force_login(rita.user)
    rejecting = {"reject-verdict": "reject", "reject-note": "no"}
    assert inbox.post(f"/inbox/actions/{rejected}/decide", rejecting).status_code == 302
    note = {"note": "split it in two"}
    assert reviewer.post(f"/actions/{changed}/request-changes", note).status_code == 200
    assert api.post(f"/actions/{cancelled}/cancel", {}).status_code == 200
    assert services.expire_due(now=timezone.now() + timedelta(days=30)) == 1

    assert not watch.outside_the_door(), "\n".join(watch.outside_the_door())
    # Seven inserts; approve, report, reject, request changes, cancel, expire: the watch
    # saw them, so it can see one elsewhere.
    assert watch.from_the_door() >= 13, watch.writes


PLANTED_AT_RUN_TIME = """\
from django.db import connection

from approvals.models import Action


def settle(pk, spelling):
    if spelling == "orm":
        Action.objects.filter(pk=pk).update(status="approved")
    elif spelling == "bulk":
        row = Action.objects.get(pk=pk)
        row.status = "approved"
        Action.objects.bulk_update([row], ["status"])
    else:
        table = connection.ops.quote_name("approvals_" + "action")
        with connection.cursor() as cursor:
            cursor.execute("UPDATE " + table + " SET status = %s WHERE id = %s", ["approved", pk])
"""


def _run_planted(path: str, pk: str, spelling: str) -> None:
    namespace: dict = {}
    exec(compile(PLANTED_AT_RUN_TIME, path, "exec"), namespace)
    namespace["settle"](pk, spelling)


@pytest.mark.django_db
@pytest.mark.parametrize("spelling", ["orm", "bulk", "sql"])
def test_the_watch_flags_a_status_write_from_a_module_outside_the_door(
    watch, agent, tmp_path, spelling
):
    from tests.factories import make_action

    first, second = make_action(agent.agent), make_action(agent.agent, idempotency_key="2")
    watch.writes.clear()
    planted = tmp_path / "planted_door.py"
    planted.write_text(PLANTED_AT_RUN_TIME)
    _run_planted(str(planted), first.pk, spelling)
    flagged = watch.outside_the_door()
    assert len(flagged) == 1 and flagged[0].startswith(f"{planted}:"), watch.writes
    # The same code, as if it lived in the door, passes: the frame is what is judged.
    watch.writes.clear()
    _run_planted(str(THE_DOOR / "planted.py"), second.pk, spelling)
    assert not watch.outside_the_door() and watch.from_the_door() == 1, watch.writes


@pytest.mark.parametrize(
    "sql, writes",
    [
        ('UPDATE "approvals_action" SET "status" = %s WHERE "id" = %s', True),
        ('UPDATE "approvals_action" SET "note" = %s, "status" = CASE WHEN (1) THEN %s END', True),
        ('INSERT INTO "approvals_action" ("id", "status") VALUES (%s, %s)', True),
        ("update approvals_action\n set status = 'x'", True),
        ('UPDATE "approvals_action" SET "result_status" = %s WHERE "status" = %s', False),
        ('UPDATE "approvals_action" SET "escalate_at" = %s', False),
        ('UPDATE "approvals_actionx" SET "status" = %s', False),
        ('SELECT "status" FROM "approvals_action"', False),
        ('INSERT INTO "approvals_review" ("status") VALUES (%s)', False),
    ],
)
def test_the_watch_reads_the_statement(sql, writes):
    assert writes_status(sql) is writes
