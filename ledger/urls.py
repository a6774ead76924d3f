from django.urls import path

from . import views

app_name = "ledger"

urlpatterns = [
    path("", views.exceptions, name="exceptions"),
    path("explain", views.explain, name="explain"),
]
