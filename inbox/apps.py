from django.apps import AppConfig


class InboxConfig(AppConfig):
    name = "inbox"
    verbose_name = "Inbox"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the socket-closing receivers)
