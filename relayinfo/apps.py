from django.apps import AppConfig


class RelayInfoConfig(AppConfig):
    name = "relayinfo"
    verbose_name = "Relay deployment"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the readiness system checks (buzz.W001 ... buzz.W006).
        from relayinfo import checks  # noqa: F401
