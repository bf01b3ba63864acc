from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "artifacts"
    verbose_name = "Artifacts and channels"
    default_auto_field = "django.db.models.BigAutoField"
