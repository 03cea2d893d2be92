"""python manage.py status [--json]: dump the palace's status."""

from palace.management.dump import DumpCommand
from palace.operations import status


class Command(DumpCommand):
    help = "Print the palace's status (counts by wing, room, hall and category)."
    selector = staticmethod(status.status)
