"""python manage.py gain [--json]: the token-gain estimate (palace_gain's answer, for operators)."""

from palace.management.dump import DumpCommand
from palace.operations import gain


class Command(DumpCommand):
    help = "Print calls and estimated tokens saved per operation (the palace_gain report)."
    selector = staticmethod(gain.gain)
