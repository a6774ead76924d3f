from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from . import site  # noqa: F401  (registers the IMPRI_BASE_URL system check)
