"""The Celery app. Scaled mode: Redis broker, `impri worker` + `impri beat`.

Embedded mode runs the same tasks eagerly and the periodic ones from the
ticker inside `impri serve` (impri/ticker.py).
"""

from __future__ import annotations

import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")

app = Celery("impri")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.setup_logging.connect
def _keep_impri_logging(**kwargs) -> None:
    """Celery leaves logging alone: Django's LOGGING (stderr, IMPRI_LOG_FORMAT) stays in charge.

    Connecting a receiver is how Celery is told not to install its own handlers.
    """
