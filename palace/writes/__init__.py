"""Every write of memories: the write API (services: store, store_batch, delete, delete_by_filter, re-exporting
the rest), corrections (supersession), restores under their own ids (restore), expiry, rebuild from the
journal (rebuild), re-redaction of a palace (scrub), a new memory's record (records) and the duplicate rule
(duplicates). Imports governance and everything below it; never palace.reads.
"""
