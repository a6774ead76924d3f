from django.apps import AppConfig


class IdentityConfig(AppConfig):
    """Who is calling: agent keys, reviewer tokens and single sign-on.

    Sign-in is whole here: the OpenID Connect flow (``oidc``), who a signed-in person is
    (``sso``), the link to the provider (``models.SsoIdentity``) and its admin inline
    (``admin``). ``Agent`` and ``ApiKey`` are ``approvals``' tables that this app manages;
    the second factor is the ``twofactor`` app beside this one.
    """

    name = "identity"
    verbose_name = "Identity"

    def ready(self) -> None:
        # The audit app never imports the apps above it: they hand it their models.
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from approvals.models import Agent, GroupNotificationSettings

        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from audit import identity

        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from .models import SsoIdentity

        identity.connect_agents_and_notifications(Agent, GroupNotificationSettings, SsoIdentity)

        # deferred: receivers connect in AppConfig.ready, once the app registry is ready
        from . import signals  # noqa: F401  (the key check's cache forgets on changes)
