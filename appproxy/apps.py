from django.apps import AppConfig


class AppproxyConfig(AppConfig):
    name = "appproxy"
    verbose_name = "AppProxy worker"
