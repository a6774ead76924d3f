from django.apps import AppConfig


class WebPushConfig(AppConfig):
    name = "webpush"
    verbose_name = "Push notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from approvals import outbox
        from delivery import outboxes

        from . import delivery

        outboxes.register(delivery.OUTBOX)

        # The core writes a group's notices; this app adds its phones as a channel of them.
        outbox.add_group_channel(
            "push", outbox.GroupChannel(reachable=delivery.reachable, enqueue=delivery.enqueue)
        )
