from django.apps import AppConfig


class ResponsestoreConfig(AppConfig):
    name = "responsestore"
    verbose_name = "Stored responses"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from router.extensions import register_answer_keeper

        from .keeper import keeper

        register_answer_keeper("responses", keeper)
