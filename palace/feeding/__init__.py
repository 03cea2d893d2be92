"""Harness transcripts into memories: the parsers (transcripts/, stdlib only), feeding a transcript's exchanges
with their feed state (exchanges), the spool hooks queue jobs in (spool, stdlib only), the process that drains
it (feeder), the remote feed client (remote), the feed status (status), the wake-up context and its snapshot
files (wakeup, snapshots), Claude Code's settings file (claude_settings) and device names (devices).

This package's __init__ stays empty of imports: `palazzo hook` loads spool and the parsers on the standard
library alone. Imports writes, reads, governance and everything below them.
"""
