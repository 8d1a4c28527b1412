"""How it is shown: console (rich), result.json / levels.csv / report.md."""
