# program: examples/tenants.stream
for tenant "acme" purge
