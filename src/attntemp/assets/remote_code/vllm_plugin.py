"""Registers AttntempScheduleLlamaForCausalLM with vLLM (written by attntemp): the
``vllm.general_plugins`` entry point of the ``attntemp_vllm_schedule`` package."""

CLASS = "AttntempScheduleLlamaForCausalLM"  # the architecture a schedule checkpoint's config names


def register() -> None:
    """Make vLLM serve ``CLASS`` with :mod:`.vllm_model`'s class (the package's ``model`` module)."""
    from vllm import ModelRegistry

    if CLASS not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(CLASS, f"attntemp_vllm_schedule.model:{CLASS}")
