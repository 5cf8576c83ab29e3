"""Modules attntemp writes into a schedule checkpoint and into vLLM's environment, as they are.

They run where attntemp is not installed (transformers' ``trust_remote_code=True``, vLLM's own
venv), so they import torch, transformers or vLLM only, never attntemp; attntemp's tests import
them here and check them against :mod:`attntemp.ops.schedules` and ``attntemp.patch``.

* :mod:`.attntemp_schedule`: the schedules' m(position, visible keys), shared by both.
* :mod:`.modeling_attntemp_schedule`: transformers' remote code, a Llama whose q rows are scaled.
* :mod:`.vllm_plugin` and :mod:`.vllm_model`: vLLM's plugin package (its ``__init__`` and ``model``),
  with ``vllm_pyproject.toml`` as its ``pyproject.toml``.
"""
