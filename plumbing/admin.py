"""What every app's admin pages share: read-only records and ids pasted as they are."""

from __future__ import annotations

from django.contrib.admin.utils import quote


class ReadOnlyAdminMixin:
    """An admin (or inline) that shows records and never adds, changes or deletes them.

    For records that are written by the services only (actions, audit events,
    outbox rows, rule-set versions). ``allow_delete = True`` keeps deletion for
    records an operator may clear by hand (budget windows, gated calls).
    """

    allow_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return self.allow_delete and super().has_delete_permission(request, obj)


class PastedIdMixin:
    """Open a record whose string id was pasted into the URL as it is.

    The admin escapes ids in its own links with ``_`` (``act_3A…`` stands for
    ``act:…``), so an id like ``act_3AkxSE…`` typed by hand would decode to
    another id and answer "doesn't exist". Ids made of letters, digits and
    ``_`` never contain what the admin escapes, so the raw form is tried too.
    """

    def get_object(self, request, object_id, from_field=None):
        found = super().get_object(request, object_id, from_field)
        if found is None and quote(object_id) != object_id:
            found = super().get_object(request, quote(object_id), from_field)
        return found
