from django.urls import path

from relayinfo import views

urlpatterns = [
    path("", views.RelayInfoView.as_view(), name="relay-root"),
    path("info", views.RelayInfoView.as_view(document_only=True), name="relay-info"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
]
