"""Two-factor pages: enrol an authenticator app, pass a code after the password, manage both."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from . import passkeys, services
from .forms import CodeForm, ConfirmForm


def _next(request: HttpRequest) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    safe = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if safe and target.startswith("/") else settings.LOGIN_REDIRECT_URL


@login_required
def manage(request: HttpRequest) -> HttpResponse:
    """Enrolment when the user has no authenticator; otherwise its status and actions."""
    device = services.authenticator(request.user)
    if services.has_second_factor(request.user) and not services.is_verified(request):
        return redirect(f"{reverse('twofactor:verify')}?{urlencode({'next': request.path})}")
    keys = passkeys.passkeys(request.user)
    if device is not None:
        context = {
            "passkeys": keys,
            "device": device,
            "codes_left": services.recovery_codes_left(request.user),
            "form": CodeForm(),
            "required": settings.IMPRI_REQUIRE_2FA,
        }
        return render(request, "twofactor/manage.html", context)
    pending = services.pending_device(request.user)
    form = ConfirmForm(request.POST or None)
    status = 200
    if request.method == "POST" and form.is_valid():
        codes = services.confirm(request, pending, form.cleaned_data["code"])
        if codes is not None:
            context = {"codes": codes, "next": _next(request)}
            return render(request, "twofactor/recovery_codes.html", context)
        form.add_error("code", "That code is not right: check the app's clock and try again.")
    if request.method == "POST":
        status = 422
    context = {
        "passkeys": keys,
        "form": form,
        "qr": services.qr_svg(pending),
        "secret": services.secret_base32(pending),
        "required": settings.IMPRI_REQUIRE_2FA,
        "next": _next(request),
    }
    return render(request, "twofactor/enrol.html", context, status=status)


@login_required
def verify(request: HttpRequest) -> HttpResponse:
    """The code after the password, and the step-up prompt outside an approval."""
    if not services.has_second_factor(request.user):
        return redirect("twofactor:manage")
    step_up = request.GET.get("step_up") == "1" or request.POST.get("step_up") == "1"
    form = CodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if services.verify(request, form.cleaned_data["code"], step_up=step_up):
            return redirect(_next(request))
        form.add_error("code", "That code is not right, or was already used.")
    status = 422 if request.method == "POST" else 200
    context = {
        "form": form,
        "next": _next(request),
        "step_up": step_up,
        "has_app": services.authenticator(request.user) is not None,
        "has_passkey": services.has_passkey(request.user),
    }
    return render(request, "twofactor/verify.html", context, status=status)


@require_POST
@login_required
def renew_codes(request: HttpRequest) -> HttpResponse:
    """Ten new recovery codes, after a code from the app; the old ones stop working."""
    form = CodeForm(request.POST)
    if not (form.is_valid() and services.verify(request, form.cleaned_data["code"])):
        messages.error(request, "New recovery codes need a current code from the app.")
        return redirect("twofactor:manage")
    codes = services.new_recovery_codes(request)
    return render(request, "twofactor/recovery_codes.html", {"codes": codes, "next": "/inbox/"})


@require_POST
@login_required
def remove(request: HttpRequest) -> HttpResponse:
    """Turn two-factor off for oneself, after a current code (or a recovery code)."""
    form = CodeForm(request.POST)
    if not (form.is_valid() and services.verify(request, form.cleaned_data["code"])):
        messages.error(request, "Removing two-factor needs a current code.")
        return redirect("twofactor:manage")
    services.remove_devices(request.user)
    messages.success(request, "Two-factor authentication is off for your account.")
    return redirect("twofactor:manage")


# --- Passkeys: the browser's two steps of each WebAuthn ceremony, as JSON ----------------


def _json_error(message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _may_register(request: HttpRequest) -> bool:
    # Verified already, or enrolling: a password alone never adds a factor to a protected account.
    return request.user.is_authenticated and services.required_step(request) in (None, "enrol")


@require_POST
def passkey_register_options(request: HttpRequest) -> HttpResponse:
    if not _may_register(request):
        return _json_error("pass your second factor first", status=403)
    return HttpResponse(passkeys.registration_options(request), content_type="application/json")


@require_POST
def passkey_register(request: HttpRequest) -> HttpResponse:
    if not _may_register(request):
        return _json_error("pass your second factor first", status=403)
    try:
        body = passkeys.parse(request.body)
        device = passkeys.register(request, body.get("credential") or {}, body.get("name", ""))
    except passkeys.Failed as failed:
        return _json_error(str(failed))
    return JsonResponse({"id": device.pk, "name": device.name}, status=201)


@require_POST
def passkey_auth_options(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return _json_error("sign in first", status=401)
    if not services.has_passkey(request.user):
        return _json_error("you have no passkey here", status=404)
    return HttpResponse(passkeys.authentication_options(request), content_type="application/json")


@require_POST
def passkey_auth(request: HttpRequest) -> HttpResponse:
    """A passkey after the password, or at a step-up (``step_up``: true)."""
    if not request.user.is_authenticated:
        return _json_error("sign in first", status=401)
    try:
        body = passkeys.parse(request.body)
        passkeys.authenticate(
            request, body.get("credential") or {}, step_up=bool(body.get("step_up"))
        )
    except passkeys.Failed as failed:
        return _json_error(str(failed))
    return JsonResponse({"verified": True, "next": _next(request)})


@require_POST
@login_required
def passkey_remove(request: HttpRequest, pk: int) -> HttpResponse:
    if not services.is_verified(request):
        return redirect("twofactor:verify")
    get_object_or_404(passkeys.PasskeyDevice, pk=pk, user=request.user).delete()
    messages.success(request, "The passkey is removed.")
    return redirect("twofactor:manage")
