"""Two-factor pages: enrol an authenticator app, pass a code after the password, manage both."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from . import services
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
    if device is not None:
        if not services.is_verified(request):
            return redirect(f"{reverse('twofactor:verify')}?{urlencode({'next': request.path})}")
        context = {
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
    if services.authenticator(request.user) is None:
        return redirect("twofactor:manage")
    step_up = request.GET.get("step_up") == "1" or request.POST.get("step_up") == "1"
    form = CodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if services.verify(request, form.cleaned_data["code"], step_up=step_up):
            return redirect(_next(request))
        form.add_error("code", "That code is not right, or was already used.")
    status = 422 if request.method == "POST" else 200
    context = {"form": form, "next": _next(request), "step_up": step_up}
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
