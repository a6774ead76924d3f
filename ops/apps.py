from django.apps import AppConfig


class OpsConfig(AppConfig):
    """What an operator looks at and runs: ``/metrics`` (``metrics``), the health probes
    (``health``), the admin site (``admin_site``) with the pages of the core's and the rules'
    models (``admin``), the figures both show (``status``), and the operator's commands
    (``management/commands``: ``impri createagent``, ``impri rules``...).

    No model: everything here is read from, or written through, the other apps.
    """

    name = "ops"
    verbose_name = "Operations"
