# program: examples/stats.stream
stream evil from "x" { value json { a: int } }
