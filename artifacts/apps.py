from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "artifacts"
    verbose_name = "Artifacts and channels"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from artifacts.signals import access_changed, events_committed
        from artifacts.ws.publish import on_access_changed, on_events_committed

        # Live fan-out (WebSocket sync): every process that writes publishes its commits and
        # readability changes, so subscribers on every instance see writes made over HTTP,
        # WebSocket, the Django admin or buzz-admin.
        events_committed.connect(on_events_committed, dispatch_uid="artifacts.ws.publish")
        access_changed.connect(on_access_changed, dispatch_uid="artifacts.ws.publish.access")
