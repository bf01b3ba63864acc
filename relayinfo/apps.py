from django.apps import AppConfig


class RelayInfoConfig(AppConfig):
    name = "relayinfo"
    verbose_name = "Relay deployment"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the readiness system checks (buzz.W001 ... buzz.W006).
        from relaycore.readiness_gate import ReadinessVerdict, use_readiness_verdict
        from relayinfo import checks  # noqa: F401
        from relayinfo.readiness import cached_readiness, deployment_ready

        # The rounds' readiness (artifacts asks relaycore.readiness_gate, never relayinfo).
        use_readiness_verdict(ReadinessVerdict(fresh=deployment_ready, cached=cached_readiness))
