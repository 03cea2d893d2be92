"""REST routers, one module per concern, mounted by palace.api."""
