from django.apps import AppConfig

from router import extensions

from .gate import gate_for


class KeysConfig(AppConfig):
    name = "keys"
    verbose_name = "API keys"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Plug the key gate and the keyring into the data plane (router.extensions)."""
        # Imported here, not at the top: keys.selectors imports keys.models, which
        # Django only allows once every app is loaded, i.e. in ready().
        from . import doctor
        from .selectors import TOPIC, compile_keyring, update_keyring

        extensions.register_gate_factory(gate_for)
        extensions.register_snapshot_part(
            "keyring",
            lambda _document: compile_keyring(),
            topics=(TOPIC,),
            update=update_keyring,
            requests_only=True,  # the tasks process never checks a key: 2 of its 2.7 s compile at 100,000 keys
        )
        extensions.register_doctor_check("keys", doctor.check)  # manage.py doctor: a usable key in blocking mode
