from django.apps import AppConfig

from router import extensions


class AppproxyConfig(AppConfig):
    name = "appproxy"
    verbose_name = "AppProxy worker"

    def ready(self) -> None:
        """Plug the ``appproxy`` YAML section, the Host ingress table and the
        worker's readiness and /status facts into the data plane
        (router.extensions)."""
        # Imported here, not at the top: these import appproxy.models, which
        # Django only allows once every app is loaded, i.e. in ready().
        from . import doctor
        from .config import validate_section
        from .legacy.selectors import compile_ingress
        from .legacy.status import readiness, worker_status
        from .models import CIRCUIT, PUBLICATION, WORKER
        from .router_mode import metrics as router_metrics
        from .router_mode import status as router_status
        from .router_mode.config import validate_router_section

        extensions.register_section_validator("appproxy", validate_section)
        extensions.register_snapshot_part("ingress", compile_ingress, topics=("document", CIRCUIT, WORKER))
        extensions.register_readiness("appproxy", readiness)
        extensions.register_status_section("appproxy", worker_status)
        # The ROUTER worker (appproxy_router, seed §9): forced blocking keys,
        # published names, its readiness and /status section.
        extensions.register_section_validator("appproxy_router", validate_router_section)
        extensions.register_snapshot_part("api_keys_mode", router_status.compile_mode, topics=("document",))
        extensions.register_snapshot_part("listed", router_status.compile_listed, topics=("document", PUBLICATION))
        extensions.register_snapshot_part("worker", router_status.compile_worker, topics=("document", WORKER))
        extensions.register_readiness("appproxy_router", router_status.readiness)
        extensions.register_status_section("appproxy_router", router_status.router_status)
        extensions.register_doctor_check("appproxy", doctor.check)  # manage.py doctor: coordinator, wildcard
        router_metrics.register()  # /metrics: the ROUTER worker's counts from the node's Redis hash
