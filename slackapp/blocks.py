"""What the Slack app shows, in Block Kit (slack_sdk's models): an action's message and the
edit modal.

Text from the agent (title, kind, agent name, payload values) is untrusted: one
line, Slack's control characters escaped (``delivery.notices``), cut to Slack's limits.
"""

from __future__ import annotations

import json

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    NumberInputElement,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from approvals import services
from approvals.models import Action, ActionStatus, Review
from approvals.presenters import bounds, inbox_url, outcome
from approvals.schemas import resolve_path
from delivery.notices import amount_text, one_line, when

from . import decisions
from .notices import slack_escape

# block_id of the buttons: it carries the hash of the payload the message shows, which an
# approval from it names (the four-eyes check), so a figure changed since is never approved.
DECIDE_BLOCK = "decide:"
EDIT_CALLBACK = "impri_edit"
NOTE_BLOCK = "note"
SETTLED = {
    ActionStatus.APPROVED: ("Approved", ":white_check_mark:"),
    ActionStatus.REJECTED: ("Rejected", ":x:"),
    ActionStatus.CHANGES_REQUESTED: ("Changes requested", ":leftwards_arrow_with_hook:"),
    ActionStatus.EXPIRED: ("Expired unanswered", ":hourglass:"),
    ActionStatus.CANCELLED: ("Cancelled", ":no_entry_sign:"),
    ActionStatus.EXECUTED: ("Approved and executed", ":white_check_mark:"),
    ActionStatus.FAILED: ("Approved; execution failed", ":warning:"),
}


def text(value, limit: int = 200) -> str:
    return slack_escape(one_line(value, limit))


def what_will_happen(action: Action) -> str:
    """``Refund $84.00 USD · order 10432``, as the inbox says it."""
    said = outcome(action)
    parts = [said.verb + (f" {said.money}" if said.money else "")]
    if said.order:
        parts.append(f"order {said.order}")
    return text(" · ".join(parts), 300)


def approvers(action: Action) -> list[str]:
    digest = services.payload_sha256(action.payload)
    reviews = action.reviews.filter(verdict=Review.Verdict.APPROVE, payload_sha256=digest)
    return [r.reviewer.get_username() for r in reviews.select_related("reviewer").order_by("at")]


def who_decided(action: Action) -> str:
    by = action.decided_by or {}
    name = text(by.get("name", ""), 150)
    if action.was_approved and action.approvals_required > 1:
        names = ", ".join(text(n, 150) for n in approvers(action))
        return f" by {names}" if names else ""
    return {
        "reviewer": f" by {name}",
        "rule": f" by the rule {name}",
        "agent": f" by the agent {name}",
    }.get(by.get("type", ""), "")


def outcome_line(action: Action) -> str:
    """The line that replaces the buttons once this message's group can no longer decide."""
    status = action.effective_status
    if status == ActionStatus.PENDING:
        group = text(action.review_group.name if action.review_group else "", 150)
        return f":arrow_right: *Escalated* to {group}: decide there or in Impri."
    label, icon = SETTLED.get(status, (status.replace("_", " ").capitalize(), ":grey_question:"))
    line = f"{icon} *{label}*{who_decided(action)}"
    if action.decided_at and status != ActionStatus.EXPIRED:
        line += f" at {when(action.decided_at)}"
    if action.was_approved and action.edited_by_human:
        line += f" · approved as edited: {text(amount_text(action), 60) or 'payload changed'}"
    if action.note and status in (ActionStatus.REJECTED, ActionStatus.CHANGES_REQUESTED):
        line += f"\n> {text(action.note, 500)}"
    return line


def buttons(action: Action) -> ActionsBlock:
    amount = text(amount_text(action), 60)
    what = what_will_happen(action)
    elements = []
    if not decisions.over_limit(action):
        elements.append(
            ButtonElement(
                text="Approve",
                action_id="approve",
                value=action.pk,
                style="primary",
                confirm=ConfirmObject(
                    title="Approve?",
                    text=one_line(f"{what}. The agent will carry it out.", 290),
                    confirm="Approve",
                    deny="Cancel",
                ),
            )
        )
        if action.editable:
            elements.append(ButtonElement(text="Edit…", action_id="edit", value=action.pk))
    elements.append(
        ButtonElement(
            text="Reject",
            action_id="reject",
            value=action.pk,
            style="danger",
            confirm=ConfirmObject(
                title="Reject?",
                text=one_line(
                    f"Reject {amount or 'this action'}? The agent will be told not to do it.", 290
                ),
                confirm="Reject",
                deny="Cancel",
                style="danger",
            ),
        )
    )
    elements.append(ButtonElement(text="Open in Impri", action_id="open", url=inbox_url(action)))
    return ActionsBlock(
        block_id=DECIDE_BLOCK + services.payload_sha256(action.payload), elements=elements
    )


def message(action: Action, group_id: int) -> tuple[str, list[dict]]:
    """The message for ``action`` in the channel of group ``group_id``: (fallback text, blocks)."""
    link = inbox_url(action)
    live = action.effective_status == ActionStatus.PENDING and action.review_group_id == group_id
    title = text(action.title, 200)
    amount = text(amount_text(action), 60)
    pending = action.effective_status == ActionStatus.PENDING
    headline = "Review needed" if live else ("Escalated" if pending else "Decided")
    fields = [f"*Agent*\n{text(action.agent.name, 100)}", f"*Kind*\n{text(action.kind, 100)}"]
    if amount:
        fields.insert(0, f"*Amount*\n{amount}")
    if action.review_group:
        fields.append(f"*Group*\n{text(action.review_group.name, 150)}")
    blocks = [
        HeaderBlock(text=PlainTextObject(text=headline)),
        SectionBlock(
            text=MarkdownTextObject(text=f"*<{link}|{title}>*\n{what_will_happen(action)}")
        ),
        SectionBlock(fields=[MarkdownTextObject(text=f) for f in fields]),
    ]
    if live:
        if action.approvals_required > 1:
            names = ", ".join(text(n, 100) for n in approvers(action)) or "none yet"
            blocks.append(
                ContextBlock(
                    elements=[
                        MarkdownTextObject(
                            text=f"Approvals: {names} (needs {action.approvals_required} reviewers)"
                        )
                    ]
                )
            )
        blocks.append(buttons(action))
        note = f"Expires {when(action.expires_at)}. A decision here is yours, as in Impri."
        if decisions.over_limit(action):
            note = (
                f"Above {decisions.limit_text(action)}, the Slack limit: approve or edit it "
                f"in Impri. {note}"
            )
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=note)]))
    else:
        line = outcome_line(action)
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"{line}\n<{link}|Open in Impri>")))
    state = "review needed" if live else action.effective_status
    fallback = " · ".join(p for p in (f"Impri: {state}", title, amount) if p)
    return fallback, [block.to_dict() for block in blocks]


# --- The edit modal ----------------------------------------------------------------------


def bounds_hint(action: Action, path: str) -> str:
    parts = []
    for bound in bounds(action, path):
        shown = f"{bound.value}" + (f" ({bound.money})" if bound.money else "")
        parts.append(
            f"{bound.name} {shown}" + (", what the agent asked" if bound.is_original else "")
        )
    return one_line("; ".join(parts) or "no bounds beyond the value's type", 1900)


def edit_input(action: Action, index: int, path: str) -> InputBlock:
    _, original = resolve_path({"payload": action.original_payload}, path)
    _, current = resolve_path({"payload": action.payload}, path)
    if isinstance(original, int | float) and not isinstance(original, bool):
        limits = {b.name: b.value for b in bounds(action, path)}
        numeric = {
            f"{k}_value": v
            for k, v in limits.items()
            if k in ("min", "max") and isinstance(v, int | float) and not isinstance(v, bool)
        }
        element = NumberInputElement(
            action_id="value",
            is_decimal_allowed=isinstance(original, float),
            initial_value=current if isinstance(current, int | float) else None,
            **numeric,
        )
    else:
        shown = current if isinstance(current, str) else json.dumps(current)
        element = PlainTextInputElement(action_id="value", initial_value=one_line(shown, 2900))
    return InputBlock(
        block_id=f"edit-{index}",
        label=one_line(path, 150),
        element=element,
        hint=bounds_hint(action, path),
    )


def edit_modal(action: Action, channel: str) -> dict:
    """Edit the editable fields within their bounds, then approve (the modal's submit)."""
    metadata = {"a": action.pk, "s": services.payload_sha256(action.payload), "c": channel}
    blocks = [
        SectionBlock(
            text=MarkdownTextObject(
                text=f"*{text(action.title, 200)}*\n{what_will_happen(action)}\n"
                f"Change what you need within the bounds shown; submitting approves it."
            )
        )
    ]
    blocks += [edit_input(action, i, path) for i, path in enumerate(action.editable)]
    blocks.append(
        InputBlock(
            block_id=NOTE_BLOCK,
            label="Note",
            optional=True,
            element=PlainTextInputElement(action_id="value", multiline=True, max_length=5000),
        )
    )
    view = View(
        type="modal",
        callback_id=EDIT_CALLBACK,
        title="Edit and approve",
        submit="Approve",
        close="Cancel",
        private_metadata=json.dumps(metadata),
        blocks=blocks,
    )
    return view.to_dict()
