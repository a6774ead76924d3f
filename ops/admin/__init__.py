"""The operator's admin pages for the core apps' models, found by Django's admin autodiscovery.

``autodiscover()`` imports ``ops.admin``; importing each module registers its ``ModelAdmin``
classes on the project's site (``ops.admin_site``, set as the default by ``impri.apps``).
The models keep their apps, so the pages keep their URLs (``/admin/approvals/action/``,
``/admin/rules/rule/``...), their permissions and their templates (``admin/<app_label>/...``).
The core packages hold no admin module: an admin imports sign-in, second factor and
delivery, which stand above the core.
"""

from . import approvals, rules

__all__ = ["approvals", "rules"]
