from django.urls import path

from webpush import views as push

from . import pwa, views

app_name = "inbox"

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", pwa.favicon, name="favicon"),
    path("inbox/", views.queue, name="queue"),
    path("inbox/decided/", views.decided, name="decided"),
    path("inbox/dashboard/", views.dashboard, name="dashboard"),
    path("inbox/manifest.webmanifest", pwa.manifest, name="manifest"),
    path("inbox/sw.js", pwa.service_worker, name="service_worker"),
    path("inbox/offline", pwa.offline, name="offline"),
    path("inbox/push/", push.devices, name="devices"),
    path("inbox/push/key", push.public_key, name="push_key"),
    path("inbox/push/subscriptions", push.subscriptions, name="push_subscriptions"),
    path("inbox/push/devices/<int:pk>/remove", push.remove_device, name="remove_device"),
    path("inbox/actions/<str:action_id>", views.action_detail, name="action"),
    path("inbox/actions/<str:action_id>/decide", views.decide, name="decide"),
    path("inbox/actions/<str:action_id>/claim", views.claim, name="claim"),
]
