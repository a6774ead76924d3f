from django.apps import AppConfig


class IdentityConfig(AppConfig):
    """Who is calling: agent keys, reviewer tokens and the single sign-on mapping.

    Their tables (``Agent``, ``ApiKey``, ``SsoIdentity``) stay in ``approvals``;
    the second factor is the ``twofactor`` app beside this one.
    """

    name = "identity"
    verbose_name = "Identity"
