"""Device names, the `<device>` of the `<harness>@<device>` stamp fed memories carry (standard library only).

One rule for PALAZZO_DEVICE (read by the site's environment, also in the hook process, which never loads
Django) and for the device a remote client names in POST /feed.
"""

from __future__ import annotations

import re

DEVICE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
