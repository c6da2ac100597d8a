#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# build_fi_ref.sh [OUTDIR] — builds FlashInfer's OWN batch-decode and
# batch-prefill modules (the ones its Python API JIT-compiles for
# BatchDecodeWithPagedKVCacheWrapper and BatchPrefillWithPagedKVCacheWrapper:
# bf16 q/kv/o, int32 indices, head dim 128, no RoPE, no sliding window, no
# soft cap) HERE, where the pinned wheel's sources are (.fi/, see
# build_cuda.sh), so that scripts/gpu_attention_ref.py can time FlashInfer's
# own plan/run on the GPU machine without the flashinfer Python package
# (whose import needs nvidia-cutlass-dsl, cuda-python, ... and ~300 MB).
#
# The sources are FlashInfer's: its csrc/batch_decode.cu and
# batch_decode_jit_binding.cu, and its two jinja templates rendered with the
# values flashinfer/jit/attention/modules.py (gen_batch_decode_module) uses;
# prefill: its batch_prefill.cu, batch_prefill_jit_binding.cu and the
# paged/ragged kernel templates for its four mask modes; the flags are its
# JIT's (-O3 -use_fast_math, sm_90a). Each module is a tvm-ffi library
# (apache-tvm-ffi, the wheel in OUTDIR, which also travels to the GPU
# machine; decode exports plan, workspace_size, run; prefill plan,
# workspace_size, ragged_run, paged_run), linked with the static CUDA
# runtime. OUTDIR defaults to .whl/fi-ref (gitignored).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/.whl/fi-ref}
data=${GPURT_FLASHINFER_DATA:-$root/.fi/flashinfer/data}
mkdir -p "$out"
out=$(cd "$out" && pwd)
say() { echo "build_fi_ref.sh: $*" >&2; }
# build_cuda.sh unpacks only the headers of the pinned wheel; its csrc/ (the
# module sources and templates) comes out of the same wheel here.
whl_fi=$(ls "$root"/.fi/flashinfer_python-*.whl 2>/dev/null | head -n 1 || true)
if [ ! -f "$data/csrc/batch_decode.cu" ] && [ -n "$whl_fi" ] && [ -z "${GPURT_FLASHINFER_DATA:-}" ]; then
  python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("flashinfer/data/csrc/")])' "$whl_fi" "$root/.fi"
fi
[ -f "$data/csrc/batch_decode.cu" ] || { say "no FlashInfer sources at $data (run scripts/build_cuda.sh first)"; exit 1; }
nvcc=${NVCC:-$(command -v nvcc || true)}
[ -n "$nvcc" ] || nvcc=$(find "$root/.cuda-venv/" -path '*/site-packages/nvidia/*/bin/nvcc' -type f | head -n 1)
[ -x "$nvcc" ] || { say "no nvcc"; exit 1; }
cudaroot=$(cd "$(dirname "$nvcc")/.." && pwd)
cudart=$(find "$cudaroot" -name libcudart_static.a | head -n 1)
whl=$(ls "$out"/apache_tvm_ffi-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$whl" ]; then
  say "fetching the apache-tvm-ffi wheel (cp312, manylinux) into $out"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux2014_x86_64 \
    -d "$out" "apache-tvm-ffi>=0.1.11,<0.2"
  whl=$(ls "$out"/apache_tvm_ffi-*.whl | head -n 1)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && python3 -m zipfile -e "$whl" tvmffi >/dev/null)
tinc=$work/tvmffi/tvm_ffi/include
tlib=$work/tvmffi/tvm_ffi/lib
gen=$work/gen
mkdir -p "$gen"
# Render FlashInfer's templates with gen_batch_decode_module's values.
python3 - "$data/csrc" "$gen" <<'PY'
import sys, jinja2, pathlib
csrc, gen = map(pathlib.Path, sys.argv[1:])
tensors = [("float", "maybe_alibi_slopes")]
scalars = [("double", "logits_soft_cap"), ("double", "sm_scale"), ("double", "rope_rcp_scale"),
           ("double", "rope_rcp_theta")]
decl = "".join(f"{t}* {n};\n" for t, n in tensors) + "".join(f"{t} {n};\n" for t, n in scalars)
func = "".join(f", Optional<ffi::Tensor> {n}" for t, n in tensors) + "".join(f", {t} {n}" for t, n in scalars)
setter = " \\\n".join([f"params.{n} = {n} ? static_cast<{t}*>({n}.value().data_ptr()): nullptr;" for t, n in tensors]
                      + [f"params.{n} = {n};" for t, n in scalars])
kw = dict(additional_params_decl=decl, additional_func_params=func, additional_params_setter=setter,
          variant_decl="#include<flashinfer/attention/variants.cuh>",
          variant_name="DefaultAttention<false, false, false, false>",
          dtype_q="nv_bfloat16", dtype_kv="nv_bfloat16", dtype_o="nv_bfloat16", idtype="int32_t",
          head_dim_qk=128, head_dim_vo=128, pos_encoding_mode="PosEncodingMode::kNone",
          use_sliding_window="false", use_logits_soft_cap="false")
(gen / "batch_decode_config.inc").write_text(
    jinja2.Template((csrc / "batch_decode_customize_config.jinja").read_text()).render(**kw))
(gen / "batch_decode_kernel.cu").write_text(
    jinja2.Template((csrc / "batch_decode_kernel_inst.jinja").read_text()).render(**kw))
for f in ("batch_decode.cu", "batch_decode_jit_binding.cu"):
    (gen / f).write_text((csrc / f).read_text())

# The batch-prefill module (gen_batch_prefill_module, backend fa2, the full
# surface: plan, ragged_run, paged_run; paged K/V strides equal), in pgen/.
pgen = gen.parent / "pgen"
pgen.mkdir(exist_ok=True)
tensors = [("uint8_t", "maybe_custom_mask"), ("int32_t", "maybe_mask_indptr"), ("float", "maybe_alibi_slopes"),
           ("uint32_t", "maybe_prefix_len_ptr"), ("uint16_t", "maybe_token_pos_in_items_ptr"),
           ("uint16_t", "maybe_max_item_len_ptr"), ("uint8_t", "maybe_k_cache_sf"), ("uint8_t", "maybe_v_cache_sf")]
scalars = [("double", "logits_soft_cap"), ("double", "sm_scale"), ("double", "rope_rcp_scale"),
           ("double", "rope_rcp_theta"), ("int64_t", "token_pos_in_items_len")]
decl = "".join(f"{t}* {n};\n" for t, n in tensors) + "".join(f"{t} {n};\n" for t, n in scalars)
func = "".join(f", Optional<ffi::Tensor> {n}" for t, n in tensors) + "".join(f", {t} {n}" for t, n in scalars)
setter = " \\\n".join([f"params.{n} = {n} ? static_cast<{t}*>({n}.value().data_ptr()): nullptr;" for t, n in tensors]
                        + [f"params.{n} = {n};" for t, n in scalars])
for x in ("k", "v"):
    setter += (" \\\n" f"if (maybe_{x}_cache_sf) {{ const auto& sf_tensor = maybe_{x}_cache_sf.value(); "
               f"auto sf_strides = GetFP4ScaleStrides(sf_tensor, kv_layout); "
               f"params.{x}_sf_stride_page = sf_strides.stride_page; "
               f"params.{x}_sf_stride_n = sf_strides.stride_n; "
               f"params.{x}_sf_stride_h = sf_strides.stride_h; }}")
kw = dict(additional_params_decl=decl, additional_func_params=func, additional_params_setter=setter,
          variant_decl="#include<flashinfer/attention/variants.cuh>",
          variant_name="DefaultAttention<use_custom_mask, false, false, false>",
          dtype_q="nv_bfloat16", dtype_kv="nv_bfloat16", dtype_o="nv_bfloat16", idtype="int32_t",
          require_fp4_kv_cache=False, head_dim_qk=128, head_dim_vo=128,
          pos_encoding_mode="PosEncodingMode::kNone", use_sliding_window="false",
          use_logits_soft_cap="false", use_fp16_qk_reduction="false", use_token_head_sf="false",
          paged_kv_stride_mode="equal", same_kv_strides_values=["true"])
(pgen / "batch_prefill_config.inc").write_text(
    jinja2.Template((csrc / "batch_prefill_customize_config.jinja").read_text()).render(**kw))
masks = ["MaskMode::kNone", "MaskMode::kCausal", "MaskMode::kCustom", "MaskMode::kMultiItemScoring"]
for m, lit in enumerate(masks):
    for kind in ("paged", "ragged"):
        (pgen / f"batch_prefill_{kind}_kernel_mask_{m}.cu").write_text(
            jinja2.Template((csrc / f"batch_prefill_{kind}_kernel_inst.jinja").read_text()).render(mask_mode=lit, **kw))
for f in ("batch_prefill.cu", "batch_prefill_jit_binding.cu", "batch_prefill_paged.cuh"):
    (pgen / f).write_text((csrc / f).read_text())
PY
flags=(-std=c++17 -O3 -DNDEBUG -use_fast_math -Xcompiler -fPIC --expt-relaxed-constexpr
       -static-global-template-stub=false -DFLASHINFER_ENABLE_F16 -DFLASHINFER_ENABLE_BF16
       -DFLASHINFER_ENABLE_FP8_E4M3 -DFLASHINFER_ENABLE_FP8_E5M2 -Xfatbin=-compress-all --compress-mode=size
       -gencode=arch=compute_90a,code=sm_90a
       -I"$gen" -I"$data/csrc" -I"$data/cccl/libcudacxx/include" -I"$data/cccl/cub" -I"$data/cccl/thrust"
       -I"$data/include" -I"$tinc" -I"$tinc/dlpack/include" -I"$work/tvmffi/tvm_ffi/3rdparty/dlpack/include")
# link_module NAME: $out/NAME.so from the objects in objs (each must have
# compiled), timed from t0.
link_module() {
  local o
  for o in "${objs[@]}"; do [ -f "$o" ] || { say "compile failed: $o"; exit 1; }; done
  g++ -shared -o "$out/$1.so" "${objs[@]}" "$cudart" -L"$tlib" -ltvm_ffi \
    -Wl,-rpath,'$ORIGIN' -ldl -lpthread -lrt
  say "built $out/$1.so in $(( $(date +%s) - t0 )) s ($(du -h "$out/$1.so" | cut -f1))"
}

t0=$(date +%s)
objs=()
for f in batch_decode_kernel batch_decode batch_decode_jit_binding; do
  "$nvcc" "${flags[@]}" -c -o "$gen/$f.o" "$gen/$f.cu" &
  objs+=("$gen/$f.o")
done
wait
link_module fi_batch_decode

# The prefill module: its ten translation units, two at a time.
t0=$(date +%s)
pgen=$work/pgen
pflags=("${flags[@]/#-I$gen/-I$pgen}")
objs=()
for c in "$pgen"/*.cu; do
  o=${c%.cu}.o
  objs+=("$o")
  "$nvcc" "${pflags[@]}" -c -o "$o" "$c" &
  [ "$(jobs -r | wc -l)" -ge "${GPURT_NVCC_JOBS:-2}" ] && wait -n
done
wait
link_module fi_batch_prefill
