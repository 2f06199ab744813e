# program: examples/alerts.stream
for tenant "acme" drop query alerts
