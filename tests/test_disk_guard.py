"""The end-to-end tests fail up front, naming the disk, when it cannot hold their checkpoints."""

import importlib.util
import os
from collections import namedtuple

import pytest

Usage = namedtuple("Usage", "total used free")


def load_conftest():
    spec = importlib.util.spec_from_file_location("tests_conftest", os.path.join(os.path.dirname(__file__), "conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Item:
    def __init__(self, *marks):
        self.keywords = dict.fromkeys(marks, True)


def test_low_disk_fails_an_end_to_end_test_with_the_cause(monkeypatch):
    conftest = load_conftest()
    monkeypatch.setattr(conftest.shutil, "disk_usage", lambda path: Usage(100e9, 98.8e9, 1.2e9))
    with pytest.raises(pytest.fail.Exception, match=r"only 1\.2 GB free in .*needs about 5 GB.*Free disk space"):
        conftest.pytest_runtest_setup(Item("slow"))
    with pytest.raises(pytest.fail.Exception):
        conftest.pytest_runtest_setup(Item("e2e_extra"))
    conftest.pytest_runtest_setup(Item("rollout"))  # a unit test runs whatever the disk


def test_enough_disk_lets_it_run(monkeypatch):
    conftest = load_conftest()
    monkeypatch.setattr(conftest.shutil, "disk_usage", lambda path: Usage(100e9, 50e9, 50e9))
    conftest.pytest_runtest_setup(Item("slow"))
    assert "free disk: 50.0 GB" in conftest.pytest_report_header(None)
