from django.urls import path

from artifacts.api import event_views, query_views

urlpatterns = [
    path("event", event_views.post_event, name="post-event"),
    path("query", query_views.post_query, name="post-query"),
]
