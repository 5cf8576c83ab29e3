"""SmolLM2-135M past its trained 8192 tokens (slow: minutes per forward on a CPU).

Run with `python -m pytest -m slow`. One held-out stdlib document at 16384 tokens.
"""

import pytest

from attntemp.evaluate import corpus
from attntemp.evaluate.tasks import EvalContext, get_task
from attntemp.hf.loading import load_model
from attntemp.hf.patch import patch
from attntemp.hf.rope_scaling import rope_for
from attntemp.ops.spec import TemperatureSpec

pytestmark = pytest.mark.slow


def test_yarn_rescues_smollm2_at_16k_and_temperature_is_measured():
    model, tok = load_model("smollm2")
    ctx = EvalContext(8192, corpus.load_text("stdlib"), n_docs=1)
    task = get_task("perplexity")
    with patch(model, TemperatureSpec()):
        plain = task.evaluate(model, tok, 16384, [1.0], ctx)[0]
    with patch(model, TemperatureSpec(rope=rope_for("yarn", 16384, 8192))):
        yarn = task.evaluate(model, tok, 16384, [1.0, 1.143], ctx)  # m = 1 and YaRN's (0.1 ln 2 + 1)^2
    assert plain["tail_ppl"] > 2 * yarn[0]["tail_ppl"]  # past 8192 the unextended model degrades
    assert abs(yarn[1]["tail_ppl"] - yarn[0]["tail_ppl"]) > 1e-3  # the temperature changes the result
