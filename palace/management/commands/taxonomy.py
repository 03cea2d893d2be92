"""`palazzo taxonomy [--json]`: how the palace's memories are filed, and nothing else."""

from palace.management.dump import DumpCommand
from palace.operations import status


class Command(DumpCommand):
    help = (
        "Print how memories are filed: counts for every wing, room, hall and category (`status` has the totals, "
        "the largest rooms only, and the index, journal and feeding)."
    )
    selector = staticmethod(status.taxonomy)
