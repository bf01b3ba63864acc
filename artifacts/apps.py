from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "artifacts"
    verbose_name = "Artifacts and channels"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from artifacts.signals import events_committed
        from artifacts.ws.publish import on_events_committed

        # Live fan-out (WebSocket sync): every process that writes publishes its commits, so
        # subscribers on every instance see writes made over HTTP, WebSocket or buzz-admin.
        events_committed.connect(on_events_committed, dispatch_uid="artifacts.ws.publish")
