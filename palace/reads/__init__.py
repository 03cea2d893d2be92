"""Reads of memories: find, browse, recall, check_duplicate and the newest memories (selectors), and how find
ranks (retrieval). Imports governance and everything below it; never palace.writes.
"""
