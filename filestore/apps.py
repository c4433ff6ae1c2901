from django.apps import AppConfig


class FilestoreConfig(AppConfig):
    name = "filestore"
    verbose_name = "Files"
    default_auto_field = "django.db.models.BigAutoField"
