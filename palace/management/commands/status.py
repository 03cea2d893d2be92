"""python manage.py status [--json]: dump the palace's status."""

from palace.management.dump import DumpCommand
from palace.operations import status


class Command(DumpCommand):
    help = "Print the palace's health: totals, counts, the largest rooms, the search index, journal and feeding."
    selector = staticmethod(status.status)
