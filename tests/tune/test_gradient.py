"""Learnable temperatures (attntemp.tune.gradient) on tiny random Llama models built in code."""

import itertools
import json

import pytest
import torch
import transformers as tf
from tiny_configs import config, model

import attntemp.hf.patch as P
from attntemp.evaluate import corpus, lm
from attntemp.evaluate.corpus import Document, is_heldout
from attntemp.hf import learnable as LT
from attntemp.ops.spec import TemperatureSpec
from attntemp.tune import gradient as G
from attntemp.tune import train as T
from attntemp.tune.train import TrainOptions

X = torch.randint(1, 97, (2, 40), generator=torch.Generator().manual_seed(1))


def logits(m, x=X):
    with torch.no_grad():
        return m(x).logits


def per_head_spec(layers=2, heads=4, seed=2, **kw):
    g = torch.Generator().manual_seed(seed)
    return TemperatureSpec.per_head(0.6 + torch.rand(layers, heads, generator=g), **kw)


def randomise(temps, seed=3, scale=0.4):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in temps.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def exact_fold(q, m):
    """fold_into_q without its fp32 rounding (for float64 finite differences)."""
    return q if m is None else q * m.to(q.dtype).unsqueeze(-1)


def exact_rms_norm(self, h):
    """LlamaRMSNorm without its fp32 upcast: float64 stays float64."""
    return self.weight * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


def test_gradient_matches_central_finite_differences(monkeypatch):
    # fp32 steps inside the model would swamp the differences; the gradient path itself is untouched
    monkeypatch.setattr(P, "fold_into_q", exact_fold)
    monkeypatch.setattr(tf.models.llama.modeling_llama.LlamaRMSNorm, "forward", exact_rms_norm)
    m = model("llama").double()
    with torch.no_grad():
        for layer in m.model.layers:
            layer.self_attn.q_proj.weight.mul_(8)  # sharper attention: temperatures matter more
    x = X[:, :24]
    with LT.learnable(m, schedule="log_length", trained_length=8) as temps:
        randomise(temps, scale=0.3)
        lm.next_token_loss(m, x, start=4).backward()
        probes = [(temps.log_m, (0, 1)), (temps.log_m, (1, 3)), (temps.slope, (0, 2)), (temps.slope, (1, 0))]
        for param, idx in probes:
            eps, grad = 1e-4, param.grad[idx].item()
            with torch.no_grad():
                param[idx] += eps
                up = lm.next_token_loss(m, x, start=4).item()
                param[idx] -= 2 * eps
                down = lm.next_token_loss(m, x, start=4).item()
                param[idx] += eps
            fd = (up - down) / (2 * eps)
            assert abs(grad) > 1e-5 and abs(grad - fd) <= 1e-4 * abs(fd), (idx, grad, fd)


def snapshot(m):
    flags = {n: p.requires_grad for n, p in m.named_parameters()}
    return flags, {k: v.clone() for k, v in m.state_dict().items()}


def assert_restored(m, flags, state, base):
    assert {n: p.requires_grad for n, p in m.named_parameters()} == flags
    assert all(torch.equal(v, state[k]) for k, v in m.state_dict().items())
    assert m.config._attn_implementation == "sdpa" and LT.learnable_of(m) is None
    assert not any(hasattr(mod, P.STATE) for mod in m.modules())
    assert torch.equal(logits(m), base)


def test_weights_frozen_inside_and_restored_after_also_on_an_exception():
    m = model("llama")
    m.lm_head.weight.requires_grad_(False)  # a mixed pattern must come back as it was
    flags, state = snapshot(m)
    base = logits(m)
    with LT.learnable(m) as temps:
        assert not any(p.requires_grad for p in m.parameters())
        assert [n for n, p in temps.named_parameters() if p.requires_grad] == ["log_m"]
        assert m.config._attn_implementation == "attntemp_sdpa" and temps.log_m.shape == (2, 4)
        lm.next_token_loss(m, X).backward()
        assert all(p.grad is None for p in m.parameters()) and temps.log_m.grad.abs().sum() > 0
    assert_restored(m, flags, state, base)
    with pytest.raises(RuntimeError, match="boom"), LT.learnable(m, granularity="layer"):
        raise RuntimeError("boom")
    assert_restored(m, flags, state, base)

    def stop(step, loss):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        T.train_temperatures(m, X, TrainOptions(steps=3, progress=False), callback=stop)
    assert_restored(m, flags, state, base)


def test_init_from_a_per_head_spec_reproduces_its_patched_logits():
    m = model("llama")
    spec = per_head_spec()
    with P.patch(m, spec):
        want = logits(m)
    with LT.learnable(m, init=spec) as temps:
        assert (logits(m) - want).abs().max() < 1e-5
        assert torch.allclose(temps.table(), spec.heads_table(2, 4).double(), rtol=1e-6)
    with LT.learnable(m, init=TemperatureSpec(layers=(0.8, 1.3)), granularity="layer") as temps:
        assert temps.log_m.shape == (2, 1)
        with torch.no_grad():
            got = logits(m)
    with P.patch(m, TemperatureSpec(layers=(0.8, 1.3))):
        assert (logits(m) - got).abs().max() < 1e-5
    with pytest.raises(ValueError, match="depends on position"):
        LT.apply_learnable(m, init=TemperatureSpec(schedule="logn", schedule_params={"trained_len": 8}))
    with pytest.raises(ValueError, match="granularity='global'"):
        LT.apply_learnable(m, init=spec, granularity="global")
    with pytest.raises(ValueError, match="granularity='row' is not allowed"):
        LT.apply_learnable(m, granularity="row")
    assert m.config._attn_implementation == "sdpa" and LT.learnable_of(m) is None


YARN = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "attention_factor": 1.0}


@pytest.mark.parametrize("rope", [None, YARN])
def test_to_spec_round_trip_gives_the_same_logits(rope):
    m = model("llama")
    x = X.repeat(1, 3)  # [2, 120]: past the rope's original length
    with LT.learnable(m, rope=rope) as temps:
        randomise(temps)
        learned = logits(m, x)
        spec = temps.to_spec()
    assert spec.rope == TemperatureSpec(rope=rope).rope
    spec = TemperatureSpec.from_json(spec.to_json())
    with P.patch(m, spec):
        assert (logits(m, x) - learned).abs().max() < 1e-5
    with P.patch(m, TemperatureSpec(rope=rope)):
        assert (logits(m, x) - learned).abs().max() > 1e-3  # the learned part did something


def test_a_few_steps_reduce_the_loss_on_a_fixed_batch():
    m = model("llama")
    x = X[:, :32]
    with LT.learnable(m) as temps:
        with torch.no_grad():
            before = lm.next_token_loss(m, x).item()
        res = T.train_temperatures(m, x, TrainOptions(steps=8, lr=0.2, batch_size=2, warmup=1, progress=False))
        with torch.no_grad():
            after = lm.next_token_loss(m, x).item()
        assert res.losses[0] == pytest.approx(before, rel=1e-5)
        assert after < before - 1e-4 and res.losses[-1] < res.losses[0]
        assert (temps.log_m.detach() != 0).all() and res.spec == temps.to_spec()
    assert len(res.lrs) == 8 and res.lrs[0] == pytest.approx(0.2) and res.lrs[-1] < res.lrs[1]


def test_learning_rate_warms_up_then_decays_by_cosine():
    lrs = [T.lr_at(s, 10, 1.0, 2) for s in range(10)]
    assert lrs[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert lrs[6] == pytest.approx(0.5) and all(a > b for a, b in itertools.pairwise(lrs[2:]))
    assert 0 < lrs[-1] < 0.05


class Interrupt(Exception):
    pass


def test_checkpoint_resume_equals_an_uninterrupted_run(tmp_path):
    m = model("llama")
    kw = dict(steps=6, lr=0.1, batch_size=1, checkpoint_every=2, progress=False, schedule="log_length")
    x = X[:, :32]
    whole = T.train_temperatures(m, x, TrainOptions(**kw), checkpoint=tmp_path / "a.pt")

    def interrupt(step, loss):
        if step == 5:  # after step 5, before its checkpoint at 6: resume starts at 4
            raise Interrupt

    with pytest.raises(Interrupt):
        T.train_temperatures(m, x, TrainOptions(**kw), checkpoint=tmp_path / "b.pt", callback=interrupt)
    assert torch.load(tmp_path / "b.pt", weights_only=True)["step"] == 4
    resumed = T.train_temperatures(m, x, TrainOptions(**kw), checkpoint=tmp_path / "b.pt")
    assert resumed.resumed_from == 4 and whole.resumed_from == 0
    for k, v in whole.state.items():
        assert torch.allclose(resumed.state[k], v, rtol=1e-6, atol=1e-7), k
    assert resumed.losses == pytest.approx(whole.losses, rel=1e-6)
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(ValueError, match=r"lr=0\.1; this run has lr=0\.2"):
        T.train_temperatures(m, x, TrainOptions(**{**kw, "lr": 0.2}), checkpoint=tmp_path / "b.pt")


def test_log_length_multiplier_is_exp_a_below_trained_length_and_its_spec_is_exact():
    temps = LT.LearnableTemperatures(2, 4, schedule="log_length", trained_length=16)
    randomise(temps)
    pos = torch.arange(40).unsqueeze(0)  # [1, 40]
    for layer in range(2):
        m = temps(layer, pos, pos + 1)  # [1, 4, 40]
        a, b = temps.log_m[layer].detach(), temps.slope[layer].detach()  # [4]
        assert torch.allclose(m[0, :, :16], a.exp().unsqueeze(-1).expand(4, 16), rtol=1e-6)
        want = a.exp().unsqueeze(-1) * ((pos[0, 16:] + 1) / 16).unsqueeze(0) ** b.unsqueeze(-1)
        assert torch.allclose(m[0, :, 16:], want, rtol=1e-5)
    mdl = model("llama")
    with LT.learnable(mdl, schedule="log_length", trained_length=16) as temps:
        randomise(temps)
        sloped = logits(mdl)
        spec = temps.to_spec()  # the log_length schedule: the learned function itself
    assert spec.schedule == "log_length" and spec.position_dependent
    with P.patch(mdl, spec):
        exact = logits(mdl)
    assert (exact - sloped).abs().max() < 1e-5  # at every position, past the trained length too
    with P.patch(mdl, TemperatureSpec()):
        assert (logits(mdl)[:, 16:] - sloped[:, 16:]).abs().max() > 1e-3  # the slope did something


def test_gradient_checkpointing_recomputes_and_learns_the_same():
    m = model("llama")
    calls = []
    hook = m.model.layers[0].self_attn.register_forward_hook(lambda *a: calls.append(1))
    kw = dict(steps=2, lr=0.1, warmup=0, progress=False)
    plain = T.train_temperatures(m, X, TrainOptions(**kw))
    n_plain = len(calls)
    ckpt = T.train_temperatures(m, X, TrainOptions(gradient_checkpointing=True, **kw))
    hook.remove()
    assert n_plain == 2 and len(calls) - n_plain == 4  # one recompute per step in the backward
    assert torch.allclose(ckpt.state["log_m"], plain.state["log_m"], atol=1e-6)
    assert not any(getattr(x, "gradient_checkpointing", False) for x in m.modules())
    assert not m.training and not any(x.training for x in m.modules())
    assert not getattr(m, "_require_grads_hooks", None)


class ByteTokenizer:
    """Bytes mod 97 as tokens: enough for held-out windows without tokenizer files."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [b % 96 + 1 for b in text.encode("utf-8")]}


def test_run_gradient_tuning_writes_its_outputs(tmp_path):
    cfg = config("llama")
    cfg.max_position_embeddings = 32
    torch.manual_seed(0)
    m = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    names = [n for n in (f"doc{i}.py" for i in range(200)) if is_heldout(n)][:4]
    docs = [Document(n, f"# {n}\n" + "def f(x):\n    return x * 2\n" * (8 + i)) for i, n in enumerate(names)]
    rope = {**YARN, "original_max_position_embeddings": 32}
    train = TrainOptions(steps=3, rope=rope, progress=False, checkpoint_every=2)
    opts = G.GradientOptions(lengths=(64,), train=train, n_train=2, n_eval=2)
    spec, ev = G.run_gradient_tuning(m, ByteTokenizer(), opts, tmp_path, docs=docs)
    assert ev["start"] == 32 and ev["steps"] == 3 and ev["train_windows"] != ev["eval_windows"]
    assert TemperatureSpec.load(tmp_path / "learned_spec.json") == spec and dict(spec.rope) == rope
    log = json.loads((tmp_path / "train_log.json").read_text())
    assert len(log["losses"]) == 3 and log["state"]["log_m"] != [[0.0] * 4] * 2
    assert (tmp_path / "learned_heatmap.png").stat().st_size > 1000 and (tmp_path / "checkpoint.pt").is_file()

    eval_ids = corpus.heldout_windows(ByteTokenizer(), 64, 4, docs=docs)[2:]
    with P.patch(m, spec):
        assert lm.perplexity(m, eval_ids, 32) == pytest.approx(ev["tail_ppl_after"], rel=1e-6)
    assert ev["tail_ppl_before"] != ev["tail_ppl_after"]


def test_one_spec_learned_from_several_lengths(tmp_path):
    m = model("llama")
    short, long = X[:2, :16], X[:2, :32]
    assert torch.equal(T._batch([short, long], 0, 1), short[:1])
    assert torch.equal(T._batch([short, long], 1, 1), long[:1])
    assert torch.equal(T._batch([short, long], 2, 1), short[1:2])  # the second round takes the next rows
    res = T.train_temperatures(m, [short, long], TrainOptions(steps=4, lr=0.1, progress=False, schedule="log_length"))
    assert len(res.losses) == 4 and res.spec.schedule == "log_length"
    with pytest.raises(ValueError, match="non-empty list"):
        T.train_temperatures(m, [], TrainOptions(steps=2, progress=False))


def test_slope_only_schedule_changes_nothing_up_to_the_trained_length():
    m = model("llama")
    x = X[:2, :32]
    with LT.learnable(m, schedule="log_length_slope", trained_length=8):
        res = T.train_temperatures(m, x, TrainOptions(steps=4, lr=0.2, progress=False))
    a, b = dict(res.spec.schedule_params)["a"], dict(res.spec.schedule_params)["b"]
    assert all(v == 0.0 for row in a for v in row) and any(v != 0.0 for row in b for v in row)
    with P.patch(m, res.spec):
        tempered = logits(m)
    plain = logits(m)
    trained = dict(res.spec.schedule_params)["trained_len"]
    assert (tempered[:, :trained] - plain[:, :trained]).abs().max() < 1e-5
