"""`extender_bench`: the same measurement as `scheduler_bench` (the name the scheduler issue uses)."""

from bench.management.commands.scheduler_bench import Command as BenchCommand


class Command(BenchCommand):
    help = BenchCommand.help
