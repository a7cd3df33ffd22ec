"""Generated protobuf/gRPC stubs. Do not edit."""
