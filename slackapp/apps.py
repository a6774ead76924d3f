from django.apps import AppConfig


class SlackAppConfig(AppConfig):
    name = "slackapp"
    verbose_name = "Slack app"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from approvals.events import action_changed
        from approvals.models import Notification
        from delivery import notices as group_notices
        from delivery import outboxes

        from . import audit_links, delivery, notices

        outboxes.register(delivery.OUTBOX)
        # A group's notices through its incoming webhook are sent by this app, too.
        group_notices.add_channel(Notification.Channel.SLACK, notices.send)
        action_changed.connect(delivery.on_action_changed, dispatch_uid="slackapp-messages")
        audit_links.connect()
