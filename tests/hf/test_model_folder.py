"""Issue 54 item 4: a local --model folder is checked before anything loads (:mod:`attntemp.hf.models.where`):
safetensors headers, weights indexes, pickles, config types, vocabulary sizes; NaN or inf weights
after loading. Each problem is one ValueError naming ``model=``, the file and what is wrong."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from attntemp.assets import tiny_path
from attntemp.hf.loading import resolve
from attntemp.hf.models import weights
from attntemp.hf.models import where as source

TENSORS = {"a": torch.zeros(3), "e": torch.zeros(0), "b": torch.ones(2, 2)}


def _file(path: Path, header, data: bytes = b"") -> Path:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def _header(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])


@pytest.fixture
def good(tmp_path) -> Path:
    save_file(TENSORS, tmp_path / "good.safetensors")
    return tmp_path / "good.safetensors"


def _edited(good: Path, edit) -> Path:
    raw = good.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    edit(header)
    return _file(good.with_name("bad.safetensors"), header, raw[8 + n :])


def _refused(match: str, call, *args) -> str:
    with pytest.raises(ValueError, match=match) as caught:
        call(*args)
    text = str(caught.value)
    assert text.startswith("model='m': ") and "\n" not in text
    return text


def test_a_well_formed_safetensors_file_passes(good):
    weights.check_safetensors(good, "m")
    assert _header(good)["e"]["data_offsets"][0] == _header(good)["e"]["data_offsets"][1]  # an empty tensor


def test_a_header_that_is_not_an_object_is_refused(tmp_path):
    text = _refused(
        "header is a JSON list; expected an object", weights.check_safetensors, _file(tmp_path / "x", [1]), "m"
    )
    assert f"{tmp_path / 'x'}: its header" in text


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda h: h["a"].__setitem__("data_offsets", "0,12"), r"tensor 'a' has data_offsets='0,12'; expected \[begin"),
        (lambda h: h["a"].__setitem__("data_offsets", None), "tensor 'a' has data_offsets=None; expected"),
        (lambda h: h["a"].__setitem__("data_offsets", [0]), r"data_offsets=\[0\]; expected"),
        (lambda h: h["a"].__setitem__("data_offsets", [0, True]), "data_offsets=.*expected"),
        (lambda h: h["a"].__setitem__("data_offsets", [12, 0]), "its end is before its begin"),
        (lambda h: h["a"].pop("data_offsets"), "tensor 'a' has no data_offsets"),
        (lambda h: h.__setitem__("a", [0, 12]), "tensor 'a' is .*expected an object with dtype"),
        (lambda h: h["a"].__setitem__("shape", "3"), "tensor 'a' has shape='3'"),
        (lambda h: h["a"].__setitem__("dtype", 4), "tensor 'a' has dtype=4"),
        (lambda h: h["a"].__setitem__("shape", [4]), "tensor 'a' has 12 bytes .* its F32 shape \\[4\\] needs 16"),
        (lambda h: h.__setitem__("__metadata__", {"format": 1}), "__metadata__ is not an object of strings"),
    ],
)
def test_a_tensor_entry_of_the_wrong_shape_is_named(good, edit, match):
    _refused(match, weights.check_safetensors, _edited(good, edit), "m")


def test_offsets_must_tile_the_file(good):
    def gap(h):
        h["a"].update(shape=[2], data_offsets=[0, 8])  # b stays at [12, 28]

    def overlap(h):
        h["b"]["data_offsets"] = [8, 24]

    _refused(
        "tensor 'b' at data_offsets=\\[12, 28\\] leaves a gap of 4 bytes",
        weights.check_safetensors,
        _edited(good, gap),
        "m",
    )
    _refused("overlaps the tensor before it", weights.check_safetensors, _edited(good, overlap), "m")
    with_tail = good.with_name("tail.safetensors")
    with_tail.write_bytes(good.read_bytes() + b"\0" * 8)
    _refused("has 8 bytes after its last tensor", weights.check_safetensors, with_tail, "m")
    cut = good.with_name("cut.safetensors")
    cut.write_bytes(good.read_bytes()[:-4])
    _refused("is truncated: its header lists", weights.check_safetensors, cut, "m")


def _index(folder: Path, shard, name: str = "model.safetensors.index.json") -> Path:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(json.dumps({"weight_map": {"w": shard}}))
    return folder / name


@pytest.mark.parametrize(
    "shard, match",
    [
        (1, "weight_map\\['w'\\]=1 is not allowed; expected a file name"),
        ("", "expected a file name"),
        (None, "expected a file name"),
        ("../../../../etc/hostname", "'../../../../etc/hostname' is not allowed: it points outside the folder"),
        ("/etc/hostname", "points outside the folder"),
        ("sub/../../x.safetensors", "points outside the folder"),
        ("..\\x.safetensors", "points outside the folder"),
        ("C:\\x.safetensors", "points outside the folder"),
    ],
)
def test_an_index_names_plain_files_inside_its_folder(tmp_path, shard, match):
    _refused(match, weights.index_shards, _index(tmp_path / "f", shard), "m")


def test_an_index_without_a_weight_map_is_refused(tmp_path):
    (tmp_path / "i.json").write_text(json.dumps({"weight_map": ["a"]}))
    _refused("i.json: has no weight_map", weights.index_shards, tmp_path / "i.json", "m")
    (tmp_path / "i.json").write_text("{bad")
    _refused("i.json: is not valid JSON", weights.index_shards, tmp_path / "i.json", "m")
    (tmp_path / "i.json").write_text(json.dumps({"weight_map": {"a": "x-1.safetensors", "b": "sub/x-2.safetensors"}}))
    assert weights.index_shards(tmp_path / "i.json", "m") == [
        tmp_path / "sub/x-2.safetensors",
        tmp_path / "x-1.safetensors",
    ]


def _tiny(dest: Path) -> Path:
    shutil.copytree(tiny_path(), dest)
    return dest


def test_an_index_pointing_outside_is_refused_before_the_file_is_opened(tmp_path, good, monkeypatch):
    folder = _tiny(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    outside = f"../{good.name}"  # a valid safetensors file, outside the folder
    _index(folder, outside)
    opened = []
    monkeypatch.setattr(weights, "check_safetensors", lambda path, name: opened.append(path))
    _refused("points outside the folder", source.check_folder, folder, "m")
    assert opened == []


def test_a_single_file_comes_before_an_index_as_in_transformers(tmp_path):
    folder = _tiny(tmp_path / "m")
    _index(folder, 1)  # not read: transformers loads model.safetensors
    assert weights.weight_files(folder, "m") == [folder / "model.safetensors"]
    assert source.check_folder(folder, "m") == folder


def test_a_truncated_safetensors_beside_a_gguf_is_still_caught(tmp_path):
    folder = _tiny(tmp_path / "m")
    (folder / "foo.gguf").write_bytes(b"GGUF")
    assert source.check_folder(folder, "m") == folder  # a whole checkpoint beside a GGUF loads
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:100_000])
    _refused("model.safetensors is truncated", source.check_folder, folder, "m")
    (folder / "model.safetensors").unlink()
    assert source.check_folder(folder, "m") == folder  # the GGUF alone: transformers' converter reads it


def test_pickles_load_as_weights_only_or_are_refused(tmp_path):
    torch.save({"w": torch.ones(3)}, tmp_path / "ok.bin")
    weights.check_pickle(tmp_path / "ok.bin", "m")
    torch.save({"w": torch.ones(3)}, tmp_path / "old.bin", _use_new_zipfile_serialization=False)
    weights.check_pickle(tmp_path / "old.bin", "m")  # the legacy format: not memory-mapped, still checked
    (tmp_path / "junk.bin").write_bytes(b"garbage, not a pickle" * 100)
    text = _refused("junk.bin: does not load with torch.load\\(weights_only=True\\)", weights.check_pickle,
                    tmp_path / "junk.bin", "m")  # fmt: skip
    assert "UnpicklingError" in text or "Error" in text
    torch.save({"w": torch.ones(3), "f": Path("x")}, tmp_path / "code.bin")  # a global weights_only refuses
    _refused("code.bin: does not load with torch.load", weights.check_pickle, tmp_path / "code.bin", "m")
    torch.save([torch.ones(3)], tmp_path / "list.bin")
    _refused("list.bin: holds a list, not a state dict of tensors", weights.check_pickle, tmp_path / "list.bin", "m")


def test_a_garbage_bin_folder_is_refused_and_a_sharded_bin_index_is_checked(tmp_path):
    folder = _tiny(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not a pickle at all")
    _refused("pytorch_model.bin: does not load with torch.load", source.check_folder, folder, "m")
    (folder / "pytorch_model.bin").unlink()
    _index(folder, "../../etc/passwd", "pytorch_model.bin.index.json")
    _refused("pytorch_model.bin.index.json: weight_map\\['w'\\]=.*points outside", source.check_folder, folder, "m")


def _config(**fields) -> dict:
    return {**json.loads((tiny_path() / "config.json").read_text()), **fields}


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"vocab_size": "258"}, "vocab_size='258' is not allowed; expected an integer"),
        ({"intermediate_size": [384]}, "intermediate_size=\\[384\\] is not allowed; expected an integer"),
        ({"hidden_size": 128.0}, "hidden_size=128.0 is not allowed"),
        ({"num_hidden_layers": True}, "num_hidden_layers=True is not allowed"),
        ({"pad_token_id": "257"}, "pad_token_id='257' is not allowed; expected a token id"),
        ({"eos_token_id": [257, "x"]}, "eos_token_id=\\[257, 'x'\\] is not allowed"),
        ({"text_config": {"head_dim": "16"}}, "text_config.head_dim='16' is not allowed"),
    ],
)
def test_config_sizes_and_token_ids_are_integers(tmp_path, fields, match):
    text = _refused(match, source.check_config_values, _config(**fields), tmp_path / "config.json", "m")
    assert f"{tmp_path / 'config.json'}: " in text


def test_config_nulls_and_eos_lists_pass(tmp_path):
    source.check_config_values(_config(pad_token_id=None, eos_token_id=[256, 257], head_dim=None), tmp_path, "m")


def test_fields_of_the_config_class_are_typed_by_transformers(tmp_path):
    folder = _tiny(tmp_path / "m")
    (folder / "config.json").write_text(json.dumps(_config(rms_norm_eps="1e-6")))
    text = _refused("config.json: rms_norm_eps is not allowed: Field 'rms_norm_eps' expected float, got str",
                    source.read_config, folder, "m")  # fmt: skip
    assert "(the llama config)" in text
    (folder / "config.json").write_text(json.dumps(_config(model_type="no-such-model")))
    assert source.read_config(folder, "m")["model_type"] == "no-such-model"  # unknown types: the loader's to judge


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"vocab_size": 100}, "config.json: pad_token_id=257 is not allowed; expected an id below vocab_size=100"),
        ({"vocab_size": 257, "pad_token_id": 0}, "eos_token_id=257 is not allowed; expected an id below vocab_size"),
        ({"vocab_size": 300, "eos_token_id": [1, 300]}, "eos_token_id=300 is not allowed"),
        ({"text_config": {"vocab_size": 10}}, "pad_token_id=257 is not allowed; expected an id below vocab_size=10"),
    ],
)
def test_special_token_ids_fit_the_vocabulary(tmp_path, fields, match):
    _refused(match, source.check_vocabulary, _config(**fields), tmp_path, "m")


def test_the_tokenizer_fits_the_vocabulary(tmp_path):
    folder = _tiny(tmp_path / "m")
    assert source.tokenizer_vocab_size(folder / "tokenizer.json") == 256  # its added <bos> <eos> aside
    source.check_vocabulary(_config(), folder, "m")
    none = {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None}
    source.check_vocabulary(_config(vocab_size=256, **none), folder, "m")
    _refused("tokenizer.json: its vocabulary has 256 ids, more than config.json's vocab_size=255",
             source.check_vocabulary, _config(vocab_size=255, **none), folder, "m")  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram", "vocab": [["a", 0.0]] * 9}}))
    assert source.tokenizer_vocab_size(folder / "tokenizer.json") == 9
    (folder / "tokenizer.json").write_text("{bad")
    assert source.tokenizer_vocab_size(folder / "tokenizer.json") is None  # its loader says what is wrong
    assert source.tokenizer_vocab_size(folder / "absent.json") is None


def test_resolve_refuses_a_folder_with_a_broken_config_before_loading(tmp_path):
    folder = _tiny(tmp_path / "m")
    (folder / "config.json").write_text(json.dumps(_config(vocab_size="258")))
    with pytest.raises(ValueError, match=r"^model='.*/m': .*config.json: vocab_size='258' is not allowed"):
        resolve(str(folder))


def test_nonfinite_weights_are_named_with_their_file(tmp_path):
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(2, 2)
            self.b = torch.nn.Linear(2, 2)

    model = Two()
    weights.refuse_nonfinite("m", model, tmp_path)
    with torch.no_grad():
        model.b.weight[0, 0] = float("nan")
        model.b.bias[0] = float("inf")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"b.weight": "x-2.safetensors"}}))
    _refused(f"^model='m': {tmp_path / 'x-2.safetensors'}: tensor 'b.weight' holds NaN; expected finite weights$",
             weights.refuse_nonfinite, "m", model, tmp_path)  # fmt: skip
    with torch.no_grad():
        model.b.weight[0, 0] = 0.0
    _refused(f"{tmp_path}: tensor 'b.bias' holds inf", weights.refuse_nonfinite, "m", model, tmp_path)
    (tmp_path / "model.safetensors").touch()
    _refused("model.safetensors: tensor 'b.bias' holds inf", weights.refuse_nonfinite, "m", model, tmp_path)


def test_a_pickle_error_while_loading_is_one_line():
    import pickle

    with pytest.raises(ValueError, match=r"^model='m' could not be loaded: UnpicklingError: bad$"):
        with source.loading("m"):
            raise pickle.UnpicklingError("bad")
