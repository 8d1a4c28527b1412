"""Request and telemetry records: the contract every summary, knee and report is computed from."""
