from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self):
        from . import identity, signals  # noqa: F401  (signals connects the login receivers)

        identity.connect()
