"""Generated protobuf/gRPC stubs of proto/journald/v1/journal.proto. Do not edit; run `make gen`."""
