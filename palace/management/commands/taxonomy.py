"""python manage.py taxonomy [--json]: dump the palace's taxonomy."""

from palace import selectors
from palace.management.dump import DumpCommand


class Command(DumpCommand):
    help = "Print the palace's taxonomy (counts by wing, room, hall and category)."
    selector = staticmethod(selectors.taxonomy)
