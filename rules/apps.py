from django.apps import AppConfig


class RulesConfig(AppConfig):
    name = "rules"
    verbose_name = "Rules"

    def ready(self):
        from . import checks  # noqa: F401  (registers impri.W004: undeclared kinds detected)
