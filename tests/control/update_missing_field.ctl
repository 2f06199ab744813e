# program: examples/alerts.stream
update watch["AAPL"] = { threshold = 250.0 }
