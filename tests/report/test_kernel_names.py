"""tokentrace.report.kernel_names on the kernel names of the real traces: mangled Proton names
demangle as binutils' c++filt writes them (expected strings made with c++filt 2.x from the names in
../shared/traces), to the very names the torch profiler recorded for the same workload, and
shorten to names a table can show."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from support.paths import SHARED_TRACES
from support.trace_files import load_json_documents
from tokentrace.report.kernel_names import demangle, display_name, short_name

# (mangled name from a Proton trace, c++filt's output)
DEMANGLED = [
    ("_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE",
     "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEvi"
     "T0_T1_",
     "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"),
    ("_ZN2at6native29vectorized_elementwise_kernelILi4EZNS0_51_GLOBAL__N__b1108092_12_PowKernel_"
     "cu_751192d7_2139629pow_tensor_scalar_kernel_implIffEEvRNS_18TensorIteratorBaseET0_EUlfE_St"
     "5arrayIPcLm2EEEEviS6_T1_",
     "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
     "namespace)::pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase&, "
     "float)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous "
     "namespace)::pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase&, "
     "float)::{lambda(float)#1}, std::array<char*, 2ul>)"),
    ("_ZN2at6native13reduce_kernelILi128ELi4ENS0_8ReduceOpIbNS0_14func_wrapper_tIbZZZNS0_14or_ke"
     "rnel_cudaERNS_14TensorIteratorEENKUlvE_clEvENKUlvE10_clEvEUlbbE_EEjbLi4ELi4EEEEEvT1_",
     "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<bool, "
     "at::native::func_wrapper_t<bool, "
     "at::native::or_kernel_cuda(at::TensorIterator&)::{lambda()#1}::operator()() "
     "const::{lambda()#12}::operator()() const::{lambda(bool, bool)#1}>, unsigned int, bool, 4, "
     "4> >(at::native::ReduceOp<bool, at::native::func_wrapper_t<bool, "
     "at::native::or_kernel_cuda(at::TensorIterator&)::{lambda()#1}::operator()() "
     "const::{lambda()#12}::operator()() const::{lambda(bool, bool)#1}>, unsigned int, bool, 4, "
     "4>)"),
    ("_ZN2at6native40_GLOBAL__N__0f1a8107_8_Shape_cu_49f7391c19CatArrayBatchedCopyINS1_10OpaqueT"
     "ypeILj2EEEjLi4ELi64ELi64EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16Ten"
     "sorSizeStrideIS8_Lj4EEEiS8_",
     "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
     "namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous "
     "namespace)::OpaqueType<2u>*, at::native::(anonymous "
     "namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, "
     "unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, "
     "4u>, int, unsigned int)"),
    ("_Z13gemmk1_kernelIifLi256ELi5ELb1ELb0ELb0ELb0E30cublasGemvTensorStridedBatchedIKfES2_S0_If"
     "EfLi0EEv18cublasGemmk1ParamsIT0_T7_T8_T9_T10_N8biasTypeINS8_10value_typeES9_E4typeEE",
     "void gemmk1_kernel<int, float, 256, 5, true, false, false, false, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float, 0>(cublasGemmk1Params<float, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float, "
     "biasType<cublasGemvTensorStridedBatched<float>::value_type, float>::type>)"),
    ("_ZN43_GLOBAL__N__b6de9c8c_10_SoftMax_cu_9f978f6320softmax_warp_forwardIN3c108BFloat16ES2_f"
     "Li6ELb0ELb0EEEvPT0_PKT_iiiPKbib",
     "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 6, "
     "false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"),
    ("_ZN50_GLOBAL__N__fa15d16e_17_RangeFactories_cu_38772b0829elementwise_kernel_with_indexIiZZ"
     "ZN2at6native15arange_cuda_outERKN3c106ScalarES6_S6_RNS1_6TensorEENKUlvE_clEvENKUlvE2_clEvE"
     "UllE_EEvT_T0_PN15function_traitsISD_E11result_typeE",
     "void (anonymous namespace)::elementwise_kernel_with_index<int, "
     "at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, "
     "at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() "
     "const::{lambda(long)#1}>(int, at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar "
     "const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() "
     "const::{lambda()#4}::operator()() const::{lambda(long)#1}, "
     "function_traits<at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, "
     "c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() "
     "const::{lambda()#4}::operator()() const::{lambda(long)#1}>::result_type*)"),
]

# (kernel name as recorded, short_name, display_name)
SHORT = [
    ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
     "at::native::vectorized_elementwise_kernel", "at::native::vectorized_elementwise_kernel [FillFunctor]"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
     "at::native::vectorized_elementwise_kernel", "at::native::vectorized_elementwise_kernel [CUDAFunctor_add]"),
    ("_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIfffNS0_15"
     "binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_",
     "at::native::elementwise_kernel", "at::native::elementwise_kernel [MulFunctor]"),
    ("_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastIZZZNS0_23direct_copy_kernel_cuda"
     "ERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE10_clEvEUlN3c108BFloat16EE_EEvS4_RKT_EUliE_EEviT1_",
     "at::native::elementwise_kernel", "at::native::elementwise_kernel [direct_copy_kernel_cuda]"),
    ("_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIffffEEjfLi4ELi4EEEEEvT1_",
     "at::native::reduce_kernel", "at::native::reduce_kernel [MeanOps]"),
    ("_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIlNS0_14func_wrapper_tIlZNS0_11sum_functorIlllEclERNS_"
     "14TensorIteratorEEUlllE_EEjlLi4ELi4EEEEEvT1_", "at::native::reduce_kernel", "at::native::reduce_kernel [sum_functor]"),
    ("_ZN2at6native40_GLOBAL__N__0f1a8107_8_Shape_cu_49f7391c19CatArrayBatchedCopyINS1_10OpaqueTypeILj2EEEjLi4ELi64"
     "ELi64EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16TensorSizeStrideIS8_Lj4EEEiS8_",
     "at::native::CatArrayBatchedCopy", "at::native::CatArrayBatchedCopy"),
    ("_ZN43_GLOBAL__N__b6de9c8c_10_SoftMax_cu_9f978f6320softmax_warp_forwardIN3c108BFloat16ES2_fLi6ELb0ELb0EEEvPT0_"
     "PKT_iiiPKbib", "softmax_warp_forward", "softmax_warp_forward"),
    ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 6, false, false>"
     "(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",
     "softmax_warp_forward", "softmax_warp_forward"),
    ("_ZN8cublasLt19splitKreduce_kernelILi32ELi16Eif13__nv_bfloat16fS1_Lb0EfS1_S1_Lb1ELb0ELb0ELb0EEEvNS_18cublasSplit"
     "KParamsIT4_EEPKT2_PKT8_PT7_PT3_PKS3_SG_PKT9_S7_PSH_PvlPS3_PiSM_SM_SG_SG_SG_SG_SG_",
     "cublasLt::splitKreduce_kernel", "cublasLt::splitKreduce_kernel"),
    ("_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE",
     "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
    ("nvjet_sm90_tst_192x64_64x6_4x1_v_bz_NNT", "nvjet_sm90_tst 192x64 4x1 NNT", "nvjet_sm90_tst 192x64 4x1 NNT"),
    ("nvjet_sm90_tst_64x32_64x16_1x2_h_bz_splitK_TNT", "nvjet_sm90_tst 64x32 1x2 splitK TNT",
     "nvjet_sm90_tst 64x32 1x2 splitK TNT"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_sm90_tst 256x128 1x2 coopA NNT",
     "nvjet_sm90_tst 256x128 1x2 coopA NNT"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_"
     "kernel__5x_cublas", "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n 32x32x8", "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n 32x32x8"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
     "cudnn sdpa_sm90_flash_fprop_wgmma_f16 64x128x128", "cudnn sdpa_sm90_flash_fprop_wgmma_f16 64x128x128"),
    ("rmsnorm_kernel", "rmsnorm_kernel", "rmsnorm_kernel"),
    ("Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pinned)"),
    ("<metric>", "<metric>", "<metric>"),
    # not in the shared traces: cutlass's wrappers name the generated kernel in their template argument
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>"
     "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)",
     "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn",
     "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn"),
]


@pytest.mark.parametrize("mangled, expected", DEMANGLED)
def test_demangle_writes_what_cxxfilt_writes(mangled, expected):
    assert demangle(mangled) == expected


@pytest.mark.parametrize("name, short, display", SHORT)
def test_short_and_display_names(name, short, display):
    assert short_name(name) == short
    assert display_name(name) == display


def test_names_outside_the_subset_come_back_unchanged():
    for name in ("rmsnorm_kernel", "_Z", "_ZN2at6native", "_Z1fIiEvT0_", "_ZN1aS9_E", "_Z3fooPU3AS1i"):
        assert demangle(name) == name
    assert demangle("_Z1fv.cold") == "f() [clone .cold]"


def _kernel_names(path) -> set[str]:
    return {e["name"] for trace in load_json_documents(path) for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") == "kernel"}


@pytest.fixture(scope="module")
def proton_names() -> set[str]:
    """Every kernel name of one Proton file per shared trace set."""
    files = [next(iter(sorted(d.glob("*.proton.chrome_trace.gz"))), None) for d in sorted(SHARED_TRACES.glob("*"))]
    files = [f for f in files if f is not None]
    if not files:
        pytest.skip(f"shared traces not present at {SHARED_TRACES}")
    return set().union(*(_kernel_names(f) for f in files))


@pytest.mark.slow
def test_every_mangled_kernel_of_the_shared_traces_demangles(proton_names):
    mangled = {n for n in proton_names if n.startswith("_Z")}
    assert len(mangled) >= 50  # hf_generate alone holds ~45 distinct torch kernels
    failed = sorted(n for n in mangled if demangle(n) == n)
    assert failed == []
    for name in mangled:  # and shorten to a name without template arguments or parameters
        short = short_name(name)
        assert short and "<" not in short and "(" not in short and len(short) < 60, (name, short)


@pytest.mark.slow
def test_demangled_proton_names_are_the_torch_profilers_names():
    # engine_mixed (Proton) and engine_mixed_kineto (torch profiler) ran the same serving engine
    proton = SHARED_TRACES / "engine_mixed" / "mix-DP0-TP0.proton.chrome_trace.gz"
    kineto = SHARED_TRACES / "engine_mixed_kineto" / "mixk-TP0.trace.json.gz"
    if not (proton.is_file() and kineto.is_file()):
        pytest.skip("engine_mixed / engine_mixed_kineto not present")
    torch_names = _kernel_names(kineto)
    demangled = {demangle(n) for n in _kernel_names(proton)}
    assert len(torch_names) >= 20 and torch_names <= demangled
    assert {short_name(n) for n in torch_names} <= {short_name(n) for n in _kernel_names(proton)}


CXXFILT = shutil.which("c++filt")


@pytest.mark.skipif(CXXFILT is None, reason="no c++filt (binutils)")
@pytest.mark.slow
def test_agrees_with_cxxfilt_on_every_shared_name(proton_names):
    mangled = sorted(n for n in proton_names if n.startswith("_Z"))
    if not mangled:
        pytest.skip("no mangled names")
    written = subprocess.run([CXXFILT], input="\n".join(mangled), capture_output=True, text=True,
                             check=True).stdout.splitlines()
    assert [demangle(n) for n in mangled] == written
