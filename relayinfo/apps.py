from django.apps import AppConfig


class RelayInfoConfig(AppConfig):
    name = "relayinfo"
    verbose_name = "Relay deployment"
    default_auto_field = "django.db.models.BigAutoField"
