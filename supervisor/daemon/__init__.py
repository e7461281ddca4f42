"""The daemon: the event loop that performs what the planner decides (see loop.py)."""
