from django.apps import AppConfig


class ClusterConfig(AppConfig):
    """The one interface to a cluster; as an app it owns the simulated cluster's tables."""

    name = "kiln.cluster"
    label = "cluster"
    verbose_name = "Cluster"
