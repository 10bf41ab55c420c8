"""nsanalyze: what holds a GPU program back, read from saved Nsight profiles.

Flow: read (ncu, nsys) -> normalize -> checks -> rank -> render. The CLI sits on top.
"""

__version__ = "0.1.0"
