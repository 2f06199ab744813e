# program: examples/alerts.stream
update watch["AAPL"] = { note = "earnings", threshold = 250.0 }
