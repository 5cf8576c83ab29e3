"""verify on vLLM: its CPU build refused in one line where the CPU lacks AVX-512."""

import pytest

from attntemp.ship.engines.vllm import check_cpu
from attntemp.utils.resources import cpu_flags, vllm_cpu_refusal


@pytest.fixture
def cpuinfo(tmp_path):
    def write(flags: str):
        path = tmp_path / "cpuinfo"
        path.write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
        return str(path)

    return write


def test_flags_are_read_from_the_first_flags_line(cpuinfo):
    assert cpu_flags(cpuinfo("fpu sse2 avx avx2 fma")) == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert cpu_flags("/nonexistent/cpuinfo") == frozenset()


@pytest.mark.parametrize(
    "flags, refused",
    [("sse2 avx avx2", "this CPU has AVX2"), ("sse2 avx", "this CPU has no AVX2"), ("avx2 avx512f avx512bw", None)],
)
def test_vllm_cpu_needs_avx512(cpuinfo, flags, refused):
    why = vllm_cpu_refusal(cpuinfo(flags))
    assert why is None if refused is None else (refused in why and "avx512f is not in" in why)


def test_verify_refuses_vllm_on_an_avx2_cpu_before_any_work(cpuinfo):
    path = cpuinfo("sse2 avx avx2")
    with pytest.raises(ValueError, match=r"^engine='vllm' cannot run on this machine: vLLM's CPU build needs AVX-512"):
        check_cpu("cpu", path)
    check_cpu("cuda:0", path)  # vLLM's GPU build has no such need
    check_cpu("cpu", cpuinfo("avx2 avx512f"))
