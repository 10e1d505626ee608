"""Attention: flash-attn's functions on scaled_dot_product_attention, and the kernels they share."""
