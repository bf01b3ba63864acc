from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "artifacts"
    verbose_name = "Artifacts and channels"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from artifacts.selectors.async_reads import lookup_community
        from artifacts.selectors.communities import community_for_host
        from artifacts.signals import access_changed, events_committed
        from artifacts.ws.publish import on_access_changed, on_events_committed
        from relaycore.edge.views import CommunityLookup, use_community_lookup

        # The relay views' community (404 otherwise), found by this app's selectors.
        use_community_lookup(
            CommunityLookup(on_thread=community_for_host, on_loop=lookup_community)
        )

        # Live fan-out (WebSocket sync): every process that writes publishes its commits and
        # readability changes, so subscribers on every instance see writes made over HTTP,
        # WebSocket, the Django admin or buzz-admin.
        events_committed.connect(on_events_committed, dispatch_uid="artifacts.ws.publish")
        access_changed.connect(on_access_changed, dispatch_uid="artifacts.ws.publish.access")
