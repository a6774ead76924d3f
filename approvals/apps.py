from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from plumbing import public_url  # noqa: F401  (registers the IMPRI_BASE_URL system check)

        from . import group_cache

        group_cache.connect()  # what moves the groups' generation
