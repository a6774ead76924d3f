from django.apps import AppConfig


class TwoFactorConfig(AppConfig):
    name = "twofactor"
    verbose_name = "Two-factor authentication"

    def ready(self):
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from . import checks, signals  # noqa: F401  (system check, receivers)
