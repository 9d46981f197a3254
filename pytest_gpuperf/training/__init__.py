"""Training workloads: the step loop shared by single-device and distributed tests (torch imported lazily)."""
