from django.apps import AppConfig


class RulesConfig(AppConfig):
    name = "rules"
    verbose_name = "Rules"

    def ready(self):
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from . import checks  # noqa: F401  (registers impri.W004: undeclared kinds detected)
