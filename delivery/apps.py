from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    """Sending what the core's outboxes hold: webhooks, e-mail and Slack notices, their lanes.

    The rows (``Notification``, ``WebhookDelivery``, ``WebhookAttempt``) keep
    their tables in ``approvals``, where they are written in the transaction of
    the change they announce; this app sends them and prunes them, and every other
    outbox (the Slack app's messages, pushes) through the same loop
    (``delivery.outboxes``).
    """

    name = "delivery"
    verbose_name = "Delivery"

    def ready(self) -> None:
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from . import notices, outboxes, webhooks

        # The apps above add theirs; the retention's summary lists them in this order.
        outboxes.register(webhooks.OUTBOX, notices.OUTBOX)
