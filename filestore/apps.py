from django.apps import AppConfig


class FilestoreConfig(AppConfig):
    name = "filestore"
    verbose_name = "Files"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from router.extensions import register_body_resolver

        from . import inline

        register_body_resolver("files", inline.MARKER, inline.resolve)
