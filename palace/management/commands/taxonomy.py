"""python manage.py taxonomy [--json]: dump the palace's taxonomy."""

from palace.management.dump import DumpCommand
from palace.operations import status


class Command(DumpCommand):
    help = "Print the palace's taxonomy (counts by wing, room, hall and category)."
    selector = staticmethod(status.taxonomy)
