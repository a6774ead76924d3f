"""The Celery app. Scaled mode: Redis broker, `impri worker` + `impri beat`.

Embedded mode runs the same tasks eagerly and the periodic ones from the
ticker inside `impri serve` (impri/ticker.py).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")

app = Celery("impri")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
