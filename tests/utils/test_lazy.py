"""utils.lazy: a module imported at its first attribute read, and nothing in sys.modules before."""

import subprocess
import sys


def test_lazy_imports_at_first_read_and_only_then():
    code = (
        "import sys\n"
        "from attntemp.utils.lazy import is_tensor, lazy\n"
        "m = lazy('fractions')\n"
        "before = 'fractions' in sys.modules\n"
        "half = m.Fraction(1, 2)\n"
        "print(before, 'fractions' in sys.modules, str(half), m.Fraction is sys.modules['fractions'].Fraction)\n"
        "print(is_tensor(1.0), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "False True 1/2 True"
    assert out[1] == "False False"  # is_tensor never imports torch


def test_an_imported_module_is_itself():
    import json

    from attntemp.utils.lazy import lazy

    assert lazy("json") is json
