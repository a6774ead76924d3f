from django.apps import AppConfig


class WaitingConfig(AppConfig):
    name = "waiting"
    verbose_name = "Waiting"
