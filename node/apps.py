from django.apps import AppConfig


class NodeConfig(AppConfig):
    """What a node runs beside the data plane (router): its processes
    (`manage.py runnode`), the tasks and beat, the operator endpoints, the
    doctor and the cluster view. It owns no models: the routing mirror's
    tables stay the router app's."""

    name = "node"
    verbose_name = "Node"
