# program: examples/alerts.stream
for tenant "acme" update watch["AAPL"] = { note = "acme's", threshold = 1.5 }
