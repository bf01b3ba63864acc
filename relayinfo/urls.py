from django.urls import path

from relayinfo import views

urlpatterns = [
    path("", views.relay_root, name="relay-root"),
    path("info", views.relay_root, name="relay-info"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
]
