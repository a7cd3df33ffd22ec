"""journald: a local journal daemon that makes AI-agent runs durable."""

__version__ = "0.1.0"
