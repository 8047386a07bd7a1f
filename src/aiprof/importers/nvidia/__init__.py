"""NVIDIA's tools: Nsight Systems exports (nsys/), Nsight Compute CSV, nvidia-smi logs."""
