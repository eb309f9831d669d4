"""bertjax.runtime.compilation_cache: where the launchers' persistent XLA cache lives, and its switch."""

import subprocess
import sys

from bertjax.runtime import compilation_cache


def test_the_folder_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTJAX_COMPILATION_CACHE", str(tmp_path / "mine"))
    assert compilation_cache.directory() == str(tmp_path / "mine")
    for off in ("off", "0", ""):
        monkeypatch.setenv("BERTJAX_COMPILATION_CACHE", off)
        assert compilation_cache.directory() is None
    monkeypatch.delenv("BERTJAX_COMPILATION_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert compilation_cache.directory() == str(tmp_path / "cache" / "bertjax" / "xla")


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    """The first process writes an entry for a slow-to-compile function; the second finds it
    (JAX counts a persistent-cache hit) and writes nothing new."""
    script = f"""
import jax, jax.numpy as jnp
from bertjax.runtime import compilation_cache
from jax._src import monitoring
hits = []
monitoring.register_event_listener(lambda event, **kw: hits.append(event) if "cache_hits" in event else None)
compilation_cache.enable({str(tmp_path / 'xla')!r})
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
def f(x):
    for _ in range(30):
        x = jnp.tanh(x @ x.T + 1.0)
    return x
jax.jit(f)(jnp.ones((64, 64))).block_until_ready()
print(len(hits))
"""
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr[-2000:]
    assert [int(run.stdout.split()[-1]) > 0 for run in runs] == [False, True]
    assert len(list((tmp_path / "xla").iterdir())) >= 1


def test_cpu_steps_compile_at_o1_unless_xla_flags_choose(monkeypatch):
    """On CPU the big steps compile with LLVM at -O1 (a quarter less compiling, steps as fast);
    a level in XLA_FLAGS (the tests' -O0) wins. The options compile to the same values."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    assert compilation_cache.compiler_options() == {"xla_backend_optimization_level": 1}
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0")
    assert compilation_cache.compiler_options() is None

    x = jnp.asarray(np.random.default_rng(0).normal(size=(16, 16)), jnp.float32)
    step = lambda x: jax.nn.gelu(x @ x.T) * jnp.exp(-x)
    np.testing.assert_allclose(jax.jit(step, compiler_options=compilation_cache.CPU_OPTIONS)(x), jax.jit(step)(x),
                               rtol=1e-6, atol=1e-6)
