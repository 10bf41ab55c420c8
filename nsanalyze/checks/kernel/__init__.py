"""Kernel checks: each reads one kernel's normalized ncu metrics."""
