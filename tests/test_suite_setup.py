"""The test suite's own set-up: the XLA flags of its processes."""

import os

from small_runs import suite_xla_flags, xla_flags


def test_the_shells_xla_flags_are_kept_and_the_device_count_is_the_suites():
    """A developer's exported XLA_FLAGS (a dump folder, an optimization level) stay, but the
    device count is BERTJAX_TEST_DEVICES': the multidevice tests need their 8 whatever the
    shell exports."""
    assert suite_xla_flags("", 8) == xla_flags(8)
    given = "--xla_dump_to=/tmp/dump --xla_force_host_platform_device_count=3 --xla_backend_optimization_level=2"
    assert suite_xla_flags(given, 8).split() == [
        "--xla_dump_to=/tmp/dump", "--xla_backend_optimization_level=2", "--xla_force_host_platform_device_count=8"]
    assert suite_xla_flags("--xla_dump_to=/tmp/dump", 1).split() == [
        "--xla_dump_to=/tmp/dump", "--xla_force_host_platform_device_count=1", "--xla_backend_optimization_level=0"]


def test_this_process_has_the_suites_device_count():
    import jax

    assert jax.device_count() == int(os.environ.get("BERTJAX_TEST_DEVICES", "8"))  # tests/conftest.py's default
