"""Shared fixtures: the shipped tiny model (loaded once) and the stdlib documents."""

import pytest
import torch

import attntemp
from attntemp.evaluate import corpus


@pytest.fixture(scope="session")
def tiny():
    model, tok = attntemp.load_model("tiny")
    return model, tok


@pytest.fixture(scope="session")
def stdlib_docs():
    return corpus.load_text("stdlib")


@pytest.fixture
def one_torch_thread():
    """Small tensors: one intra-op thread is faster than two fighting over a shared 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
