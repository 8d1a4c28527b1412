"""How to send it: one adapter per API family, each turning one request into one RequestRecord."""
