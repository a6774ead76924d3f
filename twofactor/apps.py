from django.apps import AppConfig


class TwoFactorConfig(AppConfig):
    name = "twofactor"
    verbose_name = "Two-factor authentication"

    def ready(self):
        from . import checks, signals  # noqa: F401  (system check, receivers)
