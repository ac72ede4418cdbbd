# The configuration `make run` starts: the example site on 127.0.0.1:8080.
# Every key left out takes its documented default; see README.md.

listener "http" {
  address = "127.0.0.1:8080"
}

workers {
  count       = 4
  concurrency = 16
}

limits {
  first_byte_timeout         = "5s"
  keep_alive_idle_timeout    = "15s"
  keep_alive_max_connections = 10000
  max_connections_per_client = 256
  max_queued_connections     = 1024
  max_body_bytes             = 1048576
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
