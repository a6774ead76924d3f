"""The single door for every change to an action.

REST, MCP, the inbox, admin and background tasks all call these functions.
Each change runs in one transaction that also appends its audit event, guards
its transition in SQL (``UPDATE … WHERE status = 'pending'``) so concurrent
callers get exactly one outcome, and publishes to waiters only after commit.
Nothing outside this package writes an action's state (tests/core/test_single_door.py).

| module | holds |
|---|---|
| ``pushing`` | ``push_action``: idempotency, the rules' routing, the insert |
| ``deciding`` | ``decide``: approve (with edits, four eyes) or reject; ``request_changes`` |
| ``reporting`` | the agent's ``cancel_action`` and ``report_result`` |
| ``sweeps`` | ``expire_due``, ``escalate_due``, ``remind_due``, ``flag_stale`` |
| ``waiting`` | ``await_decision`` (on a hub the caller passes: ``waiting.hub``), ``settled_among`` |
| ``selectors`` | reads and permissions (``get_action_for_*``, ``can_review``) |
| ``edits`` | the pure edit checks (``apply_edits``, ``edit_bounds``) |
| ``common`` | what transitions share (transaction, ``payload_sha256``, groups) |
"""

from .common import default_group, payload_sha256
from .deciding import decide, request_changes
from .edits import apply_edits, edit_bounds
from .pushing import check_supersedes, push_action
from .reporting import cancel_action, report_result
from .selectors import can_review, get_action_for_agent, get_action_for_reviewer
from .sweeps import escalate_due, expire_due, flag_stale, remind_due
from .waiting import ProgressCallback, answer_lane, await_decision, settled_among, waiter

__all__ = [
    "ProgressCallback",
    "answer_lane",
    "apply_edits",
    "await_decision",
    "settled_among",
    "waiter",
    "can_review",
    "cancel_action",
    "check_supersedes",
    "decide",
    "default_group",
    "edit_bounds",
    "escalate_due",
    "expire_due",
    "flag_stale",
    "get_action_for_agent",
    "get_action_for_reviewer",
    "payload_sha256",
    "push_action",
    "remind_due",
    "report_result",
    "request_changes",
]
