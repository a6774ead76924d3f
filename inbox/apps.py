from django.apps import AppConfig


class InboxConfig(AppConfig):
    name = "inbox"
    verbose_name = "Inbox"

    def ready(self) -> None:
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from . import signals  # noqa: F401  (connects the socket-closing receivers)
