"""Test-wide set-up: 8 simulated CPU devices (for sharding tests), a temporary folder of
the session's own, and the `slow` marker."""

import os
import shutil
import tempfile

# Must happen before jax is imported anywhere: the mesh tests need 8 devices.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

# TFDS and TensorFlow's autograph leave files in the temporary folder (about 80 empty
# metadata folders per GLUE test file): give each test process one of its own, removed at
# the end. pytest's tmp_path folders live there too; xdist workers nest theirs inside.
_SESSION_TMP = tempfile.mkdtemp(prefix="bertjax-tests-")
os.environ["TMPDIR"] = tempfile.tempdir = _SESSION_TMP

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def prepared_dir(tmp_path_factory):
    """The demo corpus prepared once for the whole session (pre-training tests share it)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bertjax.data import prepare
    from configs import pretrain as pretrain_config

    directory = str(tmp_path_factory.mktemp("demo_data"))
    prepare.ensure_prepared(pretrain_config.get_config("tiny").data, directory)
    return directory


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test, skipped unless --runslow")


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_TMP, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
