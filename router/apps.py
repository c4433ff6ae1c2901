from django.apps import AppConfig


class RouterConfig(AppConfig):
    name = "router"
    verbose_name = "Router"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: router.checks reads router.services,
        # which imports the models, and Django loads models after apps.
        from . import checks  # noqa: F401  (registers system checks)
