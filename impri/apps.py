from django.contrib.admin.apps import AdminConfig


class ImpriAdminConfig(AdminConfig):
    """Django's admin, with Impri's site (``impri.admin_site``) as the default one."""

    default_site = "impri.admin_site.ImpriAdminSite"
