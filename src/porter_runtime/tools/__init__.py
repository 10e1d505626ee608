"""What porter's own tools run the user's code with: porter doctor's probes, porter fit's
peak-memory recorder, porter verify --emulate mps's emulation and its table of MPS kernels."""
