"""Which aten operators lack an MPS kernel, per torch version (generated: do not edit).

Read from native_functions.yaml in the macOS arm64 wheels (porter's reference
mps_ops_coverage.txt); regenerate with bench/mps_coverage_table.py. One letter per
version in VERSIONS: M no MPS kernel (NotImplementedError on MPS unless
PYTORCH_ENABLE_MPS_FALLBACK=1), P MPS kernel, c composite (decomposes, works),
a absent in that version. Operators with an MPS kernel in every version are not listed.
"""
from __future__ import annotations

VERSIONS = [(2, 6), (2, 7), (2, 8), (2, 9), (2, 10), (2, 11), (2, 12), (2, 13)]

_ROWS = """
_adaptive_avg_pool3d MMMMMMMM
_add_relu.Scalar MMMMMMMM
_add_relu.Tensor MMMMMMMM
_add_relu_.Scalar MMMMMMMM
_add_relu_.Tensor MMMMMMMM
_addmm_activation MMMMMMMM
_aminmax MMMMMMMM
_aminmax.dim MMMMMMMM
_amp_foreach_non_finite_check_and_unscale_ MMPPPPPP
_amp_update_scale_ MMPPPPPP
_assert_async MMMMMMMP
_assert_async.msg MMMMMMMP
_cholesky_solve_helper MMMMMMPP
_compute_linear_combination MMMMMMMM
_conv_depthwise2d MMMMMMMM
_convert_weight_to_int4pack_for_cpu MMMMMMMM
_ctc_loss MMMMMMMM
_ctc_loss.Tensor MMMMMMMM
_cummax_helper MMPPPPPP
_cummin_helper MMPPPPPP
_dirichlet_grad MMMMMMMP
_dyn_quant_matmul_4bit aMMMMMMM
_dyn_quant_pack_4bit_weight aMMMMMMM
_efficient_attention_forward MMMMMMMM
_embedding_bag MMMMPPPP
_embedding_bag_forward_only MMMMPPPP
_fill_mem_eff_dropout_mask_ MMMMMMMM
_flash_attention_forward MMMMMMMM
_flash_attention_forward_no_dropout_inplace aaaaaaMM
_functional_assert_async.msg MMMMMMMM
_fused_adagrad_ MMMMMMMM
_fused_adagrad_.tensor_lr aaMMMMMM
_fused_dropout MMMMMMMM
_fused_sdp_choice MMMMMMMM
_grouped_mm aaMccccc
_int_mm MMMMMMMM
_linalg_det MPPPPPPP
_linalg_det.result MPPPPPPP
_linalg_eigh MMMMMMMM
_linalg_eigh.eigenvalues MMMMMMMM
_linalg_eigvals MMMMMMMM
_linalg_slogdet MPPPPPPP
_linalg_slogdet.sign MPPPPPPP
_linalg_solve_ex MPPPPPPP
_linalg_solve_ex.result MPPPPPPP
_linalg_svd MMMMMMMM
_linalg_svd.U MMMMMMMM
_logcumsumexp MMMPPPPP
_make_dep_token MMMMMMMM
_masked_scale MMMMMMMM
_masked_softmax MMMMMMMM
_native_multi_head_attention MMMMMMMM
_pdist_forward MMMMMMMM
_philox_key_fold_in aaaaaaMM
_philox_key_split aaaaaaMM
_philox_normal_ aaaaaaMM
_philox_uniform_ aaaaaaMM
_sample_dirichlet MMMMMMMP
_scaled_dot_product_efficient_attention MMMMMMMM
_scaled_dot_product_flash_attention MMMMMMMM
_scaled_dot_product_flash_attention_for_cpu MMMMMMMM
_scaled_grouped_mm aMMMMMMM
_scaled_grouped_mm_v2 aaaaMMMM
_scaled_mm MMMMMMMM
_scaled_mm_v2 aaaaMMMM
_slow_conv2d_forward MMMMMMMM
_spdiags MMMMMMMM
_standard_gamma MMMMMMPP
_standard_gamma_grad MMMMMMPP
_thnn_fused_gru_cell MMMMMMMM
_thnn_fused_lstm_cell MMMMMMMM
_transform_bias_rescale_qkv MMMMMMMM
_transformer_encoder_layer_fwd MMMMMMMM
_triton_multi_head_attention MMMMMMMM
_triton_scaled_dot_attention MMMMMMMM
_unique MMMMMPPP
_upsample_bicubic2d_aa MMPPPPPP
_upsample_bilinear2d_aa MPPPPPPP
_upsample_lanczos2d_aa aaaaaaMM
_upsample_nearest_exact3d MMPPPPPP
_weight_int4pack_mm_for_cpu MMMMMMMM
adaptive_max_pool3d MMMMMMMM
addmm.dtype aaMMMMMM
addmm.dtype_out aaMMMMMM
angle MPPPPPPP
avg_pool3d MMMPPPPP
baddbmm.dtype aaMMMMMM
baddbmm.dtype_out aaMMMMMM
batch_norm_elemt MMMMMMMM
batch_norm_gather_stats MMMMMMMM
batch_norm_gather_stats_with_counts MMMMMMMM
batch_norm_stats MMMMMMMM
batch_norm_update_stats MMMMMMMM
binomial MMMMMMMM
bmm.dtype aaMMMMMM
bmm.dtype_out aaMMMMMM
cauchy_ MMMMMPPP
channel_shuffle MMMMMMMM
cholesky MPPPPPPP
cholesky_inverse MMMMMPPP
col2im MMPPPPPP
conv_depthwise3d MMMMMMMM
embedding_renorm_ MMMMMMMM
erfc MMPPPPPP
erfc_ MMPPPPPP
fractional_max_pool2d MMMMMMMM
fractional_max_pool3d MMMMMMMM
frexp.Tensor_out MMMMMMMM
from_file MMMMMMMM
gcd MMMMMPPP
gcd_ MMMMMPPP
geometric_ MMMMMPPP
geqrf MMMMMMMM
geqrf.a MMMMMMMM
glu_jvp MMMMMMMM
grid_sampler_3d MMMPPPPP
hardshrink MMPPPPPP
hash_tensor aaaMMMMM
heaviside MMMMMMMM
heaviside_ MMMMMMMM
igamma MMMPPPPP
igamma_ MMMPPPPP
igammac MMMPPPPP
igammac_ MMMPPPPP
index_copy MMPPPPPP
index_copy_ MMPPPPPP
index_reduce MMMMMMPP
index_reduce_ MMMMMMPP
isin.Scalar_Tensor MMPPPPPP
isin.Scalar_Tensor_out MMPPPPPP
isin.Tensor_Scalar MMPPPPPP
isin.Tensor_Scalar_out MMPPPPPP
kthvalue.values MMMPPPPP
lcm MMMMMMMP
lcm_ MMMMMMMP
linalg_cholesky_ex MPPPPPPP
linalg_cholesky_ex.L MPPPPPPP
linalg_eig MMMMMMMM
linalg_householder_product MMMMPPPP
linalg_ldl_factor_ex MMMMMMMM
linalg_ldl_solve MMMMMMMM
linalg_lu MMMMPPPP
linalg_lu_factor_ex MPPPPPPP
linalg_lu_solve MMMMMMMM
linalg_matrix_exp MMMMMMMM
linalg_qr MMMMMMPP
log_normal_ MMMMMPPP
logit_ MMMMMMMM
lu_unpack MPPPPPPP
max.unary_out MMMMMMMM
max_unpool2d MMMPPPPP
max_unpool3d MMMPPPPP
min.unary_out MMMMMMMM
mm.dtype aaMMMMMM
mm.dtype_out aaMMMMMM
mode MMMMMMMM
multi_margin_loss MMMMMMMM
multilabel_margin_loss_forward MMMMMMMM
nanmedian MMPPPPPP
native_dropout MMMPPPPP
nonzero_static MMMMMMPP
ormqr MMMMMMMM
poisson MMMMMMMM
put_ MMMMMMMM
record_stream MMMMMMMM
round.decimals MPPPPPPP
round.decimals_out MPPPPPPP
round_.decimals MPPPPPPP
rrelu_with_noise MMMMMMMM
rrelu_with_noise_ MMMMMMMM
rsub.Tensor MMPPPPPP
sinc MPPPPPPP
sinc_ MPPPPPPP
slow_conv3d_forward MMMMMMMM
slow_conv_dilated2d MMMMMMMM
slow_conv_dilated3d MMMMMMMM
slow_conv_transpose2d MMMMMMMM
slow_conv_transpose3d MMMMMMMM
special_airy_ai MMMMMMMM
special_bessel_j0 MMPPPPPP
special_bessel_j1 MMPPPPPP
special_bessel_y0 MMPPPPPP
special_bessel_y1 MMPPPPPP
special_chebyshev_polynomial_t MMPPPPPP
special_chebyshev_polynomial_u MMPPPPPP
special_chebyshev_polynomial_v MMPPPPPP
special_chebyshev_polynomial_w MMPPPPPP
special_entr MPPPPPPP
special_erfcx MMMMMPPP
special_hermite_polynomial_h MMPPPPPP
special_hermite_polynomial_he MMPPPPPP
special_i0e MMPPPPPP
special_i1e MMPPPPPP
special_laguerre_polynomial_l MMMMMMMM
special_legendre_polynomial_p MMMMMMMM
special_log_ndtr MMMMMMMM
special_modified_bessel_i0 MMPPPPPP
special_modified_bessel_i1 MMPPPPPP
special_modified_bessel_k0 MMPPPPPP
special_modified_bessel_k1 MMPPPPPP
special_ndtri MMMMMMMM
special_scaled_modified_bessel_k0 MMPPPPPP
special_scaled_modified_bessel_k1 MMPPPPPP
special_shifted_chebyshev_polynomial_t MMMPPPPP
special_shifted_chebyshev_polynomial_u MMMPPPPP
special_shifted_chebyshev_polynomial_v MMMPPPPP
special_shifted_chebyshev_polynomial_w MMMPPPPP
special_spherical_bessel_j0 MPPPPPPP
special_xlog1py MPPPPPPP
special_zeta MPPPPPPP
std.correction_out MMMMMMMM
take MMMMMMMM
unique_dim MMMMPPPP
upsample_nearest3d MMPPPPPP
upsample_trilinear3d MMPPPPPP
var.correction_out MMMMMMMM
vdot MMMMMPPP
"""

#: operator (``name`` or ``name.overload``) -> one letter per version in VERSIONS
TABLE = dict(line.split() for line in _ROWS.strip().splitlines())


def missing(op: str, version: tuple) -> str:
    """The letter for ``op`` in the column of ``version`` (the nearest listed one), '' if unlisted."""
    row = TABLE.get(op)
    if row is None:
        return ""
    older = [i for i, v in enumerate(VERSIONS) if v <= version]
    return row[older[-1] if older else 0]
