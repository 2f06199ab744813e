# program: examples/alerts.stream
delete watch["MSFT"]
