from django.apps import AppConfig


class TwoFactorConfig(AppConfig):
    name = "twofactor"
    verbose_name = "Two-factor authentication"

    def ready(self):
        from . import signals  # noqa: F401  (receivers)
