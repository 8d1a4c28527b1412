"""What to send: length distributions, prompts of exact token counts, prompt files."""
