"""Load profiles for the workbench: see run.py."""
