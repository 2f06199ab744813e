# program: examples/alerts.stream
update watch["MSFT"] = { threshold = 300, note = "split" }
