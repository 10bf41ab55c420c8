"""One schema for every profile: unit-carrying concepts per kernel launch, timelines for nsys."""

from nsanalyze.normalize.kernels import KernelTable, normalize_ncu, normalize_nsys_kernels

__all__ = ["KernelTable", "normalize_ncu", "normalize_nsys_kernels"]
