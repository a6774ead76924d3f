from django.apps import AppConfig


class WebPushConfig(AppConfig):
    name = "webpush"
    verbose_name = "Push notifications"
    default_auto_field = "django.db.models.BigAutoField"
