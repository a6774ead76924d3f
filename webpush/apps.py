from django.apps import AppConfig


class WebPushConfig(AppConfig):
    name = "webpush"
    verbose_name = "Push notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from approvals import outbox

        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from delivery import outboxes

        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from . import delivery
        from .models import PushSubscription

        outboxes.register(delivery.OUTBOX)

        # The core writes a group's notices; this app adds its phones as a channel of them.
        outbox.add_group_channel(
            "push",
            outbox.GroupChannel(
                reachable=delivery.reachable,
                enqueue=delivery.enqueue,
                watch=(PushSubscription,),  # a phone registered or removed: reach is read again
            ),
        )
