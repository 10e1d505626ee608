"""What the device rules share: CUDA index sources (PT901), literal device specs (PT003-PT005)
and the table-driven torch.cuda twins."""
