"""The long real-model runs' dtype follows the CPU, as docs/scale.md measured it."""

from attntemp.hf.devices import long_run_cpu_dtype

AMD = "vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
INTEL = "vendor_id\t: GenuineIntel\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"


def test_bf16_on_an_amd_cpu_with_avx512_bf16_and_on_amx():
    assert long_run_cpu_dtype(AMD) == "bfloat16"  # measured 1.14-1.16x there
    assert long_run_cpu_dtype(INTEL) == "float32"  # measured 0.76x there (issue 35)
    amx = INTEL.replace(" avx512_bf16", " avx512_bf16 amx_bf16 amx_tile")
    assert long_run_cpu_dtype(amx) == "bfloat16"  # an advise row at 0.30x fp32's time there
    assert long_run_cpu_dtype(AMD.replace(" avx512_bf16", "")) == "float32"  # emulated
    assert long_run_cpu_dtype(AMD.replace("avx512_bf16", "avx512_bf16x")) == "float32"  # a flag, not a prefix
