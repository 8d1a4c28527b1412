"""When to send it: closed-loop (N users) and open-loop (rate) drivers, and the sweep over levels."""
