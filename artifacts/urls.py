from django.urls import path

from artifacts.api.views import EventView, QueryView

urlpatterns = [
    path("event", EventView.as_view(), name="post-event"),
    path("query", QueryView.as_view(), name="post-query"),
]
