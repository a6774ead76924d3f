from django.urls import path

from . import views

app_name = "twofactor"

urlpatterns = [
    path("", views.manage, name="manage"),
    path("verify/", views.verify, name="verify"),
    path("recovery-codes/", views.renew_codes, name="renew_codes"),
    path("remove/", views.remove, name="remove"),
    path(
        "passkeys/register/options", views.passkey_register_options, name="passkey_register_options"
    ),
    path("passkeys/register", views.passkey_register, name="passkey_register"),
    path("passkeys/auth/options", views.passkey_auth_options, name="passkey_auth_options"),
    path("passkeys/auth", views.passkey_auth, name="passkey_auth"),
    path("passkeys/<int:pk>/remove", views.passkey_remove, name="passkey_remove"),
]
