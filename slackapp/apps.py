from django.apps import AppConfig


class SlackAppConfig(AppConfig):
    name = "slackapp"
    verbose_name = "Slack app"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from approvals.events import action_changed

        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from approvals.models import Notification

        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from delivery import notices as group_notices

        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from delivery import outboxes

        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from . import audit_links, delivery, notices

        outboxes.register(delivery.OUTBOX)
        # A group's notices through its incoming webhook are sent by this app, too.
        group_notices.add_channel(Notification.Channel.SLACK, notices.send)
        action_changed.connect(delivery.on_action_changed, dispatch_uid="slackapp-messages")
        audit_links.connect()
