# program: examples/tenants.stream
purge
