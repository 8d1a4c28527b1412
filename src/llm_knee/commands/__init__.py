"""Orchestration behind the CLI commands: wiring the rooms together, doing the I/O the rooms avoid."""
