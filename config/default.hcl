# gatehouse's built-in configuration: what it serves when given no file.
# Every key left out takes its documented default (docs/DESIGN.md §7).

listener "http" {
  address = "127.0.0.1:8080"
}

route "/" {
  static {
    root = "examples/www"
  }
}

route "/healthz" {
  respond {
    status = 200
    body   = "ok\n"
  }
}
