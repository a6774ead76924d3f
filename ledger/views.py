"""Pages and the Stripe endpoint: parse, call the ledger's services, shape the answer."""

from __future__ import annotations

import logging

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST, require_safe

from approvals.errors import Conflict, Forbidden, ImpriError

from . import selectors, services, stripe_events
from .models import EXCEPTIONS

logger = logging.getLogger(__name__)


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> HttpResponse:
    """Stripe's events: 400 for a bad or stale signature, 200 for the rest."""
    header = request.headers.get("Stripe-Signature", "")
    try:
        what, count = stripe_events.receive(request.body, header)
    except stripe_events.BadSignature as exc:
        return JsonResponse(
            {"detail": f"Stripe-Signature: {exc}", "field": "Stripe-Signature"}, status=400
        )
    except (ImpriError, KeyError, TypeError, ValueError) as exc:
        logger.warning("stripe event refused: %s", exc)
        return JsonResponse({"detail": f"event: {exc}", "field": "data.object"}, status=400)
    return JsonResponse({"received": what, "movements": count})


@require_safe
@login_required
def exceptions(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    state = state if state in EXCEPTIONS else ""
    source = request.GET.get("source", "")[:20]
    currency = request.GET.get("currency", "").upper()[:3]
    return render(
        request,
        "ledger/reconciliation.html",
        {
            "view": "reconciliation",
            "rows": selectors.exceptions(state, source, currency),
            "states": EXCEPTIONS,
            "state": state,
            "source": source,
            "currency": currency,
            "summary": selectors.summary(),
            "can_reconcile": services.can_reconcile(request.user),
        },
    )


@require_POST
@login_required
def explain(request: HttpRequest) -> HttpResponse:
    action_id = request.POST.get("action_id", "")
    movement = request.POST.get("movement_id", "")
    try:
        services.explain(
            request.user,
            reason=request.POST.get("reason", ""),
            action_id=action_id,
            movement_id=int(movement) if movement.isdigit() else None,
        )
    except Forbidden as exc:
        return HttpResponseForbidden(str(exc))
    except Conflict as exc:
        return HttpResponse(str(exc), status=409)
    except ImpriError as exc:
        return HttpResponse(str(exc), status=422)
    back = request.POST.get("next", "")
    if back.startswith("/inbox/") and "//" not in back:
        return redirect(back)
    return redirect(reverse("ledger:exceptions"))
