"""OpenCL C source from fused traces."""
