"""Program checks: each reads an nsys timeline (and GPU metrics where the export has them)."""
