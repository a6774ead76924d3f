from django.urls import path

from . import views

app_name = "twofactor"

urlpatterns = [
    path("", views.manage, name="manage"),
    path("verify/", views.verify, name="verify"),
    path("recovery-codes/", views.renew_codes, name="renew_codes"),
    path("remove/", views.remove, name="remove"),
]
