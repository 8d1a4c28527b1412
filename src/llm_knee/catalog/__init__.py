"""Hardware, model architectures and dtypes shared by the planner and the simulator."""
