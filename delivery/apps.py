from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    """Sending what the core's outboxes hold: webhooks, e-mail and Slack notices, their lanes.

    The rows (``Notification``, ``WebhookDelivery``, ``WebhookAttempt``) keep
    their tables in ``approvals``, where they are written in the transaction of
    the change they announce; this app sends them and prunes them.
    """

    name = "delivery"
    verbose_name = "Delivery"
