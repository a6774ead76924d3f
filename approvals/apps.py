from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from audit import identity
        from plumbing import public_url  # noqa: F401  (registers the IMPRI_BASE_URL system check)

        from .models import Agent, GroupNotificationSettings, SsoIdentity

        identity.connect_agents_and_notifications(Agent, GroupNotificationSettings, SsoIdentity)
