from django.apps import AppConfig


class RouterConfig(AppConfig):
    name = "router"
    verbose_name = "Router"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers system checks)
