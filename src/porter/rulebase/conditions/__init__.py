"""Where code runs only with CUDA: availability checks, guards, test gates, flags that pick a name."""
