"""The JetStream backend: runs in one existing stream, side data in its buckets, leases in a KV
bucket (docs/design.md#jetstream-backend)."""
