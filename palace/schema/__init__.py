"""The memory model: the one schema of a memory's fields (memories), the forms every entry point validates
through (forms) and the timestamp format (timefmt). Imports only palace.errors (and the Django forms library).
"""
