"""Pure functions over records and summaries: statistics, knees, recommendation, alarms."""
