"""Reviewer pages: the queue, the decided history, an action, and deciding it.

Each view parses, calls a read helper or ``approvals.services``, and renders.
One view serves both the full page and the htmx fragment asked for (the
``HX-Target`` names it), and every htmx request has a plain-HTML twin: without
JavaScript the same URLs answer with full pages and redirects.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe
from django_htmx.middleware import HtmxDetails

from approvals import reviewer_claims, services, stepup
from approvals.errors import (
    ActionNotFound,
    ActionNotPending,
    Forbidden,
    InvalidInput,
    StalePayload,
    StepUpRequired,
)
from approvals.services import selectors
from audit.models import AuditEvent
from twofactor import services as twofactor

from . import charts, csv_export, presenters, queries
from . import dashboard as dashboard_figures
from .forms import (
    ApproveForm,
    ChangesForm,
    DashboardRangeForm,
    QueueFilterForm,
    RejectForm,
    add_service_error,
)


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


# HX-Target -> the template that renders just that part of the page.
QUEUE_PARTS = {
    "queue-results": "inbox/_results.html",
    "queue-counts": "inbox/_counts.html",
    "more": "inbox/_rows.html",
}


def home(request: HttpRequest) -> HttpResponse:
    return redirect("inbox:queue")


@require_safe
@login_required
def queue(request: HtmxHttpRequest) -> HttpResponse:
    """Pending actions. ``?only=<id>`` answers one row (or nothing) for the live socket."""
    form = QueueFilterForm(request.GET, user=request.user)
    form.is_valid()
    filters = form.filters()
    pending = selectors.filtered(selectors.pending_for(request.user), filters, request.user)
    if request.GET.get("only"):
        rows = pending.filter(pk=request.GET["only"]).select_related(
            "agent", "review_group", "claim__user"
        )
        return render(request, "inbox/_rows.html", {"rows": rows, "live": True})
    context = {"form": form, "filters": filters, "view": "queue"}
    part = QUEUE_PARTS.get(request.htmx.target or "") if request.htmx else None
    if part != "inbox/_counts.html":
        context["page"] = queries.page(pending, form.order, form.cursor)
        context["rows"] = context["page"].items
    if part != "inbox/_rows.html":
        context["counts"] = queries.counts(request.user, filters, context.get("page"))
    return render(request, part or "inbox/queue.html", context)


@require_safe
@login_required
def decided(request: HtmxHttpRequest) -> HttpResponse:
    """The history: actions the reviewer's groups can no longer decide, latest first."""
    form = QueueFilterForm(request.GET, user=request.user)
    form.is_valid()
    filters = form.filters()
    history = selectors.filtered(selectors.decided_for(request.user), filters, request.user)
    page = queries.page(history, "decided", form.cursor)
    context = {
        "form": form,
        "filters": filters,
        "view": "decided",
        "page": page,
        "rows": page.items,
    }
    part = {"queue-results": "inbox/_results.html", "more": "inbox/_rows.html"}
    target = request.htmx.target if request.htmx else None
    return render(request, part.get(target or "", "inbox/decided.html"), context)


def _reviewable(request: HttpRequest, action_id: str):
    try:
        return services.get_action_for_reviewer(action_id, request.user)
    except ActionNotFound:
        raise Http404("no such action, or not in your review groups") from None


def _action_context(request: HttpRequest, action, **forms) -> dict:
    before, after = queries.neighbours(request.user, action)
    pending = not action.is_settled
    owner = action.agent.is_owned_by(request.user)
    return {
        "owner": owner,
        "action": action,
        "outcome": presenters.outcome(action),
        "leaves": presenters.leaves(action),
        "mismatches": presenters.amount_mismatches(action),
        "amount_context": presenters.amount_context(action),
        "money_fields": presenters.money_fields(action),
        "money_warnings": presenters.money_warnings(action),
        "reviews": action.reviews.select_related("reviewer"),
        "payload_sha256": services.payload_sha256(action.payload),
        "history": AuditEvent.objects.for_action(action.pk),
        # An owner never approves their agent's actions: no form to try with.
        "approve_form": None
        if owner
        else forms.get("approve") or (ApproveForm(action) if pending else None),
        "reject_form": forms.get("reject") or (RejectForm(action) if pending else None),
        "changes_form": forms.get("changes") or (ChangesForm(action) if pending else None),
        "claim": reviewer_claims.current(action),
        "result_by": presenters.result_by(action),
        "result_fields": list(action.result_detail.items())
        if isinstance(action.result_detail, dict)
        else [],
        "superseded_by": action.superseded_by.order_by("created_at").first(),
        "bounds": {path: presenters.bounds(action, path) for path in action.editable},
        "previous": before,
        "next": after,
        "stepup": _step_up_prompt(request, action) if pending and not owner else None,
    }


def _step_up_prompt(request: HttpRequest, action) -> dict | None:
    """Whether the approve form asks for a code: money at the step-up limit, no fresh factor."""
    if not stepup.needs_step_up(action):
        return None
    credential = stepup.Credential("session", verified_at=twofactor.verified_at(request.session))
    if stepup.is_fresh(credential):
        return None
    money = presenters.action_money.primary(action)
    return {
        "limit": presenters.Money(stepup.threshold(), money.currency if money else ""),
        "enrolled": twofactor.has_second_factor(request.user),
        "app": twofactor.authenticator(request.user) is not None,
        "passkey": twofactor.has_passkey(request.user),
    }


@require_safe
@login_required
def action_detail(request: HtmxHttpRequest, action_id: str) -> HttpResponse:
    action = _reviewable(request, action_id)
    template = "inbox/action.html"
    if request.htmx and request.htmx.target in ("action", "reviews"):
        template = f"inbox/_{request.htmx.target}.html"
    return render(request, template, _action_context(request, action))


@require_POST
@login_required
def decide(request: HtmxHttpRequest, action_id: str) -> HttpResponse:
    """Approve (with edits) or reject. Errors come back on the form: 422 invalid, 409 too late."""
    action = _reviewable(request, action_id)
    verdict = (
        request.POST.get("approve-verdict")
        or request.POST.get("reject-verdict")
        or request.POST.get("changes-verdict")
    )
    form_class = {"approve": ApproveForm, "reject": RejectForm, "changes": ChangesForm}.get(
        verdict or ""
    )
    if form_class is None:
        return HttpResponse("verdict must be approve, reject or changes", status=400)
    form = form_class(action, request.POST)
    if form.is_valid():
        code = request.POST.get("stepup-code", "").strip() if verdict == "approve" else ""
        if code and not twofactor.verify(request, code, step_up=True):
            return _step_up(request, action, form, "That code is not right, or was already used.")
        try:
            if verdict == "changes":
                services.request_changes(action.pk, by=request.user, note=form.note_text())
            else:
                with stepup.via_session(twofactor.verified_at(request.session)):
                    services.decide(
                        action.pk,
                        by=request.user,
                        verdict=verdict,
                        edits=form.edits(),
                        note=form.note_text(),
                        reason=form.reason_code(),
                        approves_sha256=form.seen_sha256(),
                    )
        except StepUpRequired as error:
            return _step_up(request, action, form, error.message)
        except InvalidInput as error:
            add_service_error(form, error)
        except ActionNotPending:
            return _after_decision(request, action_id, too_late=True)
        except StalePayload as error:
            return _stale(request, action_id, error)
        except Forbidden as error:
            return HttpResponse(error.message, status=403)
        else:
            return _after_decision(request, action_id, too_late=False)
    context = _action_context(request, action, **{verdict: form})
    template = "inbox/_action.html" if request.htmx else "inbox/action.html"
    return render(request, template, context, status=422)


def _step_up(request: HtmxHttpRequest, action, form, message: str) -> HttpResponse:
    """Nothing was approved: the form comes back as sent, asking for a code (422, like a form error)."""
    context = _action_context(request, action, approve=form)
    context["stepup_error"] = message
    template = "inbox/_action.html" if request.htmx else "inbox/action.html"
    return render(request, template, context, status=422)


def _stale(request: HtmxHttpRequest, action_id: str, error: StalePayload) -> HttpResponse:
    """Another reviewer changed the figure since this page was loaded: show the new one, approve nothing."""
    action = _reviewable(request, action_id)
    context = _action_context(request, action)
    context["stale"] = error.message
    template = "inbox/_action.html" if request.htmx else "inbox/action.html"
    return render(request, template, context, status=409)


def _after_decision(request: HtmxHttpRequest, action_id: str, *, too_late: bool) -> HttpResponse:
    """Show the action as it now stands: a fragment for htmx, else redirect after success (PRG)."""
    action = _reviewable(request, action_id)
    if too_late:
        messages.warning(request, "Too late: this action was already settled. Nothing was changed.")
    elif not request.htmx:
        return redirect("inbox:action", action_id=action_id)
    template = "inbox/_action.html" if request.htmx else "inbox/action.html"
    status = 409 if too_late else 200
    return render(request, template, _action_context(request, action), status=status)


@require_POST
@login_required
def claim(request: HtmxHttpRequest, action_id: str) -> HttpResponse:
    """ "I'm on it" (``release=1``: no longer). Advisory: shown to others, stops nobody."""
    action = _reviewable(request, action_id)
    if request.POST.get("release"):
        reviewer_claims.release(action, request.user)
    elif not action.is_settled:
        reviewer_claims.claim(action, request.user)
    if request.POST.get("beacon"):
        return HttpResponse(status=204)  # a beacon from a page being left: nobody reads the answer
    if not request.htmx:
        return redirect("inbox:action", action_id=action_id)
    return render(request, "inbox/_reviews.html", _action_context(request, action))


@require_safe
@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Volume, outcomes, time to decision, refunds, stale approvals and expiries over a date range."""
    if not dashboard_figures.can_see(request.user):
        raise PermissionDenied("the dashboard is for staff and the view_dashboard permission")
    form = DashboardRangeForm(request.GET, today=timezone.now().date())
    if not form.is_valid():
        return render(
            request, "inbox/dashboard.html", {"form": form, "view": "dashboard"}, status=400
        )
    since, until = form.cleaned_data["since"], form.cleaned_data["until"]
    figures = dashboard_figures.figures(since, until)
    export = form.cleaned_data["export"]
    if export:
        return csv_export.response(figures, export)
    context = {
        "view": "dashboard",
        "figures": figures,
        "volume": charts.volume(figures.days),
        "decisions": charts.decision_lines(figures.days),
        "median": charts.duration(figures.median_s),
        "p90": charts.duration(figures.p90_s),
        "outcomes": dashboard_figures.OUTCOMES,
        "totals": {o: figures.totals[o] for o in dashboard_figures.OUTCOMES},
        "refunded_total": [
            charts.money(cents, currency) for currency, cents in figures.refunded_total.items()
        ],
        "refunds": {
            dimension: charts.horizontal(figures.refunded_rows(dimension))
            for dimension in ("rule", "agent", "reviewer")
        },
        # The range shown, defaults filled in, so the inputs and the CSV links say what it is.
        "form": DashboardRangeForm({"since": since, "until": until}, today=until),
        "query": f"since={since.isoformat()}&until={until.isoformat()}",
    }
    return render(request, "inbox/dashboard.html", context)
