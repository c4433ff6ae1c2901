"""System checks (`manage.py check`): the router YAML must be valid."""

from __future__ import annotations

from django.core import checks

from .config_schema import ConfigError, load
from .services import resolve_config_path


@checks.register("router")
def check_router_config(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    path = resolve_config_path()
    if not path.exists():
        return [checks.Error(f"the router config {path} does not exist",
                             hint="set ROUTER_CONFIG to a YAML file, or create router.yaml", id="router.E001")]
    try:
        load(path)
    except ConfigError as exc:
        return [checks.Error(str(exc), hint="see docs/configuration.md", id="router.E002")]
    return []
