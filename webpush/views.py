"""A reviewer's push subscriptions: the JSON endpoints the inbox's script calls, and a page.

``POST /inbox/push/subscriptions`` takes the browser's ``PushSubscription`` JSON
(``endpoint``, ``keys.p256dh``, ``keys.auth``) from a signed-in session with its CSRF
token and answers 201 with the reviewer's device, whether the endpoint was new, theirs
already, or another reviewer's (then it is held, and theirs untouched); ``DELETE`` on the
same path with the endpoint removes the reviewer's own; ``GET`` lists the reviewer's
devices. ``GET /inbox/push/key`` is the VAPID public key the browser
subscribes with. ``/inbox/push/`` is the page where a reviewer sees and removes devices.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from plumbing import strict_json

from . import endpoints, keys
from .models import PushSubscription


def _error(message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _device(subscription: PushSubscription) -> dict:
    return {
        "id": subscription.pk,
        "endpoint_host": endpoints.host(subscription.endpoint),
        "device": subscription.device,
        "created_at": subscription.created_at.isoformat(),
        "last_push_at": subscription.last_push_at.isoformat()
        if subscription.last_push_at
        else None,
    }


@require_GET
def public_key(request: HttpRequest) -> HttpResponse:
    response = JsonResponse({"publicKey": keys.public_key()})
    response["Cache-Control"] = "no-cache"
    return response


@require_http_methods(["GET", "POST", "DELETE"])
def subscriptions(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return _error("sign in first", status=401)
    if request.method == "GET":
        mine = PushSubscription.objects.filter(user=request.user)
        return JsonResponse({"devices": [_device(s) for s in mine]})
    body = _json_object(request)
    if isinstance(body, HttpResponse):
        return body
    if request.method == "DELETE":
        return _unsubscribe(request, body)
    try:
        fields = endpoints.parse(body)
    except endpoints.Invalid as exc:
        return _error(str(exc))
    device = endpoints.device_label(request.headers.get("User-Agent", ""))
    try:
        subscription = _register(request.user, fields, device)
    except IntegrityError:  # this reviewer's two requests for one endpoint at once
        return _error("this subscription is being saved already; try again", status=409)
    # 201 whatever was there: the answer never says whether anyone else registered it.
    return JsonResponse(_device(subscription), status=201)


def _json_object(request: HttpRequest) -> dict | HttpResponse:
    """The request's body as a JSON object, or the answer that refuses it."""
    try:
        body = strict_json.loads(request.body or b"{}")
    except strict_json.Refused as exc:
        return _error(f"body: {exc}", status=422)
    except ValueError:
        return _error("the body must be JSON")
    if not isinstance(body, dict):
        return _error("the body must be a JSON object")
    return body


def _unsubscribe(request: HttpRequest, body: dict) -> HttpResponse:
    endpoint = body.get("endpoint") or request.GET.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        return _error("name the subscription's endpoint")
    removed = PushSubscription.objects.filter(user=request.user, endpoint=endpoint).delete()[0]
    if not removed:
        return _error("no such subscription of yours", status=404)
    return HttpResponse(status=204)


def _register(user, fields: dict, device: str) -> PushSubscription:
    """This reviewer's registration of the endpoint, made or refreshed; nobody else's row is
    read or touched. Held when another reviewer registered the endpoint first
    (``models.PushSubscription``)."""
    mine = PushSubscription.objects.filter(user=user, endpoint=fields["endpoint"]).first()
    if mine is not None and (mine.p256dh, mine.auth, mine.device) == (
        fields["p256dh"],
        fields["auth"],
        device,
    ):
        return mine  # the page says so again on each load: nothing to write
    with transaction.atomic():
        subscription, _ = PushSubscription.objects.update_or_create(
            user=user, endpoint=fields["endpoint"], defaults={**fields, "device": device}
        )
    return subscription


@require_GET
@login_required
def devices(request: HttpRequest) -> HttpResponse:
    mine = PushSubscription.objects.filter(user=request.user)
    return render(request, "inbox/devices.html", {"devices": mine, "view": "devices"})


@require_POST
@login_required
def remove_device(request: HttpRequest, pk: int) -> HttpResponse:
    get_object_or_404(PushSubscription, pk=pk, user=request.user).delete()
    return redirect("inbox:devices")
