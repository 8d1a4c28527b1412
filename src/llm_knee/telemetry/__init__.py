"""What to watch alongside: GPU, host, server /metrics and client self-check samplers."""
