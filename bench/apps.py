from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Benchmarks, load tests and demos (development only)."""

    name = "bench"
    label = "bench"
    verbose_name = "Benchmarks"
