"""Shared fixtures: the shipped tiny model (loaded once) and the stdlib documents."""

import contextlib
import subprocess
import sys

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


@pytest.fixture
def held_lock():
    """``with held_lock(path) as pid:``: another process holds an exclusive flock on ``path`` (as
    a running writer does, its pid written in it) until the block ends; then it is killed."""

    @contextlib.contextmanager
    def hold(path):
        code = (
            f"import fcntl, os, time; f = open({str(path)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX);"
            "f.truncate(0); f.write(str(os.getpid())); f.flush(); print('held', flush=True); time.sleep(60)"
        )
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "held"
            yield proc.pid
        finally:
            proc.kill()
            proc.wait()

    return hold
