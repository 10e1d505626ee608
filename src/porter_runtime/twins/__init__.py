"""The torch.cuda twins: device queries and calls, memory counters, events and NVTX ranges."""
