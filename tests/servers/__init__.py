"""Real HTTP servers the tests start in their own processes on 127.0.0.1."""
