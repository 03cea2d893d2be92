"""python manage.py status [--json]: dump the palace's status."""

from palace import selectors
from palace.management.dump import DumpCommand


class Command(DumpCommand):
    help = "Print the palace's status (counts by wing, room, hall and category)."
    selector = staticmethod(selectors.status)
