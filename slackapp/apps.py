from django.apps import AppConfig


class SlackAppConfig(AppConfig):
    name = "slackapp"
    verbose_name = "Slack app"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from approvals.events import action_changed
        from delivery import outboxes

        from . import audit_links, delivery

        outboxes.register(delivery.OUTBOX)
        action_changed.connect(delivery.on_action_changed, dispatch_uid="slackapp-messages")
        audit_links.connect()
