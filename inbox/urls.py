from django.urls import path

from . import pwa, views

app_name = "inbox"

urlpatterns = [
    path("", views.home, name="home"),
    path("inbox/", views.queue, name="queue"),
    path("inbox/decided/", views.decided, name="decided"),
    path("inbox/dashboard/", views.dashboard, name="dashboard"),
    path("inbox/manifest.webmanifest", pwa.manifest, name="manifest"),
    path("inbox/sw.js", pwa.service_worker, name="service_worker"),
    path("inbox/offline", pwa.offline, name="offline"),
    path("inbox/actions/<str:action_id>", views.action_detail, name="action"),
    path("inbox/actions/<str:action_id>/decide", views.decide, name="decide"),
    path("inbox/actions/<str:action_id>/claim", views.claim, name="claim"),
]
