from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class ImpriConfig(AppConfig):
    """The project's own app: the commands that run Impri as a whole (``impri/management``).

    ``serve``, ``worker``, ``beat``, ``mcp``, ``waitdb`` and ``backup`` start or look after
    the whole deployment, not one app's models, so they live here rather than in ``approvals``.
    It has no model of its own any more (``GrantSigningKey`` moved to ``approvals``);
    its migrations stay, so a database made before the move migrates in order.
    """

    name = "impri"
    verbose_name = "Impri"

    def ready(self) -> None:
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from . import checks  # noqa: F401  (registers impri.W003: replicas' grant keys differ)


class ImpriAdminConfig(AdminConfig):
    """Django's admin, with Impri's site (``ops.admin_site``) as the default one."""

    default_site = "ops.admin_site.ImpriAdminSite"
