from django.apps import AppConfig


class LedgerConfig(AppConfig):
    """Reconciliation (docs/reconciliation.md): movements, their states, the exceptions."""

    name = "ledger"
    verbose_name = "Reconciliation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # deferred: models and receivers load in AppConfig.ready, once the app registry is ready
        from approvals import presenters
        from delivery import outboxes
        from plumbing.metrics import registry

        from . import metrics, notices, selectors

        presenters.RECONCILIATION.append(selectors.reconciliation_out)
        outboxes.register(notices.OUTBOX)
        registry.register(metrics.LedgerCollector())
