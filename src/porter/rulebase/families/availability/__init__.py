"""What the torch.cuda.is_available() rules share (PT201, PT202): the choices such a test
makes, the roles of its calls, what each side of it does, and PT202's decisions."""
