"""Timing: what a trace costs on a generation. Needs no values, so one trace re-times for any target."""
