"""Shared fixtures: the shipped tiny model (loaded once) and the stdlib documents."""

import pytest

import attntemp
from attntemp import data


@pytest.fixture(scope="session")
def tiny():
    model, tok = attntemp.load_model("tiny")
    return model, tok


@pytest.fixture(scope="session")
def stdlib_docs():
    return data.load_text("stdlib")
