"""The daemon: a thin gRPC servicer over the core and a store."""
