from django.apps import AppConfig

from router import extensions


class AppproxyConfig(AppConfig):
    name = "appproxy"
    verbose_name = "AppProxy worker"

    def ready(self) -> None:
        """Plug each AppProxy mode (its YAML section, snapshot parts,
        readiness and /status facts; appproxy/modes.py) and the doctor check
        into the data plane (router.extensions)."""
        # Imported here, not at the top: these import appproxy.models, which
        # Django only allows once every app is loaded, i.e. in ready().
        from . import doctor, modes

        for mode in modes.MODES:
            mode.plug_in()
        extensions.register_doctor_check("appproxy", doctor.check)  # manage.py doctor: coordinator, wildcard
