"""An input pipeline that gives nothing: refused at once for the known cause (a corpus of one
document of one sentence), and any other stall still stops on SIGTERM. Each run that could
hang runs in a subprocess with a timeout, so a regression fails instead of stalling CI."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))

from bertjax.data.corpora import demo_corpus  # noqa: E402
from test_train import SMALL, _env  # noqa: E402


def _one_line_corpus(tmp_path):
    path = tmp_path / "one_line.txt"
    path.write_text(" ".join(f"word{i % 50} said the man" for i in range(2000)))  # ~10k tokens, no line break
    return str(path)


def test_a_corpus_of_one_sentence_is_refused_in_one_line(tmp_path):
    """Evaluation off (SMALL): the run that used to spin forever; with it on, the same check
    comes first, before the empty eval split could be blamed on eval_fraction."""
    command = [sys.executable, os.path.join(ROOT, "launch", "pretrain.py"),
               f"--config={os.path.join(ROOT, 'configs', 'pretrain.py')}:tiny", f"--workdir={tmp_path / 'run'}",
               "--config.data.source=text", f"--config.data.input_pattern={_one_line_corpus(tmp_path)}",
               f"--config.data.vocab_path={demo_corpus.demo_vocab_path(str(tmp_path))}", *SMALL,
               "--config.train.num_steps=3"]
    result = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=90)
    assert result.returncode == 2, result.stderr[-3000:]
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: config.data.input_pattern=") and "one document of one sentence" in error
    assert "eval_fraction" not in error


def test_a_pipeline_of_empty_epochs_is_refused_instead_of_spinning(tmp_path):
    from bertjax.data import pretraining
    import synthetic
    from test_pretraining import data_config

    paths = synthetic.write_shards(str(tmp_path), 1, 1, min_sentences=1, max_sentences=1)
    pipeline = pretraining.PretrainingPipeline(data_config(), shard_paths=paths, batch_size=4,
                                               tokenizer=synthetic.tokenizer_for(1))
    with pytest.raises(ValueError, match="give this host no sequences .next-sentence prediction needs"):
        next(pipeline.batches())
    no_nsp = pretraining.PretrainingPipeline(data_config(next_sentence_prediction=False), shard_paths=paths,
                                             batch_size=4, tokenizer=synthetic.tokenizer_for(1))
    assert next(no_nsp.batches())["input_ids"].shape == (4, 64)


# A tf.data iterator that never yields: it spins in TensorFlow's C++, where Python's signal
# handlers never run (the hang of issue 24). The loop's input wait must still see SIGTERM.
_STALLED_INPUT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import tensorflow as tf
    from bertjax.runtime import preemption

    watcher = preemption.PreemptionWatcher()
    never = iter(tf.data.Dataset.range(1 << 62).filter(lambda x: x < 0))
    batches = preemption.interruptible(never, watcher, poll_seconds=0.1)
    print("waiting", flush=True)
    try:
        next(batches)
    except preemption.InputInterrupted as e:
        print(f"interrupted: {e}", flush=True)
        sys.exit(3)
""")


def test_sigterm_stops_a_wait_on_a_stalled_input_pipeline(tmp_path):
    script = tmp_path / "stall.py"
    script.write_text(_STALLED_INPUT)
    process = subprocess.Popen([sys.executable, str(script), ROOT], env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 3, stderr[-3000:]
    assert stdout.startswith("interrupted: SIGTERM while waiting")


def _loop(tmp_path, num_steps, log_every=1, eval_every=0, start_step=0):
    """A training_loop.Loop on tmp_path that checkpoints only when made to (interval 100)."""
    from bertjax import checkpointing, training_loop

    checkpointer = checkpointing.Checkpointer(str(tmp_path / "checkpoints"), save_interval_steps=100,
                                              max_to_keep=2, async_save=False)
    return training_loop.Loop(workdir=str(tmp_path), checkpointer=checkpointer, saved_config={}, num_steps=num_steps,
                        start_step=start_step, log_every=log_every, eval_every=eval_every,
                        max_consecutive_bad_steps=3, sequences_per_step=1.0)


def test_a_stop_while_the_input_stalls_saves_and_names_the_step(tmp_path, monkeypatch):
    import threading

    import jax.numpy as jnp

    from bertjax import checkpointing, training_loop

    from bertjax.runtime import preemption

    released, joined = threading.Event(), []
    join = threading.Thread.join
    monkeypatch.setattr(threading.Thread, "join", lambda thread, *args, **kwargs: (
        joined.append(thread.name), join(thread, *args, **kwargs))[1])

    def stalled():
        yield {"x": 1}
        released.wait()  # stalled until the test ends

    loop = _loop(tmp_path, num_steps=10)
    try:
        batches = loop.input(stalled())
        assert loop.next_batch(batches, 0, None) == {"x": 1}
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with pytest.raises(training_loop.TrainingStopped,
                           match=r"preempted \(SIGTERM\) at step 1 after waiting .*saved step 1 to"):
            loop.next_batch(batches, 1, {"w": jnp.ones(3)})
        # Saved without first waiting for the stalled thread (a review: 10 s of a 30 s grace period).
        assert preemption.input_thread_alive() and preemption.INPUT_THREAD not in joined
    finally:
        released.set()
        loop.close()
    assert checkpointing.Checkpointer(str(tmp_path / "checkpoints"), save_interval_steps=1, max_to_keep=2,
                                      async_save=False).latest_step() == 1
    following = _loop(tmp_path / "next", num_steps=3)  # the signal was heeded: not the next run's
    try:
        assert not following.watcher.should_stop(1)
    finally:
        following.close()


def test_a_stop_signal_at_the_last_step_finishes_the_run(tmp_path):
    """The run is complete at its last step (saved there): raising 'preempted' made fine-tuning
    skip its predictions and exit non-zero, so a scheduler retried a finished run (a review).
    One step earlier, the same signal stops it."""
    import jax.numpy as jnp

    from bertjax import checkpointing, training_loop

    loop = _loop(tmp_path, num_steps=3)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        loop.save(3, {"w": jnp.ones(3)})  # no TrainingStopped
        with pytest.raises(training_loop.TrainingStopped, match=r"preempted \(SIGTERM\): saved step 2"):
            loop.save(2, {"w": jnp.ones(3)})
    finally:
        loop.close()
    assert checkpointing.Checkpointer(str(tmp_path / "checkpoints"), save_interval_steps=1, max_to_keep=2,
                                      async_save=False).all_steps() == [2, 3]


def test_a_signal_the_last_step_did_not_stop_for_stops_the_next_run_of_the_process(tmp_path):
    """A signal at a run's last step finishes that run; the demo's next stage or a sweep's next
    run then started with the handlers put back and the signal forgotten, and ran on until
    the scheduler's SIGKILL (a review): it stops at its first step."""
    import jax.numpy as jnp

    loop = _loop(tmp_path / "first", num_steps=3)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        loop.save(3, {"w": jnp.ones(3)})  # the run finishes
    finally:
        loop.close()
    following = _loop(tmp_path / "next", num_steps=3)
    try:
        assert following.watcher.should_stop(1)
    finally:
        following.close()
    again = _loop(tmp_path / "again", num_steps=3)  # heeded once, then forgotten
    try:
        assert not again.watcher.should_stop(1)
    finally:
        again.close()


def test_a_stop_logs_the_steps_since_the_last_log_step(tmp_path):
    """The resumed run starts after the stop's step and never logs the steps before it: they are
    written as a row at that step (a review found up to log_every - 1 steps lost)."""
    import json

    import flax
    import jax
    import jax.numpy as jnp

    from bertjax import training_loop

    @flax.struct.dataclass
    class State:
        w: jax.Array
        worst_bad_run: jax.Array
        skipped_steps: jax.Array

    state = State(jnp.ones(3), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
    loop = _loop(tmp_path, num_steps=100, log_every=10)
    try:
        for step in (1, 2, 3):
            loop.record(step, {"loss": jnp.float32(step), "learning_rate": jnp.float32(0.1),
                               "grad_norm": jnp.float32(1.0)}, state)
            if step < 3:
                loop.save(step, state)
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(training_loop.TrainingStopped, match=r"saved step 3"):
            loop.save(3, state)
    finally:
        loop.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(row["step"], row["loss"]) for row in rows] == [(3, 2.0)]


def test_a_stop_at_an_evaluation_step_saves_first_and_the_resumed_run_evaluates(tmp_path):
    """A dev-set evaluation (minutes for SQuAD) ran before the stop's save and could outlast the
    notice's grace period (a review): the save comes first, its meta says the evaluation is
    owed, and the run resumed there evaluates before its first step."""
    import jax.numpy as jnp

    from bertjax import training_loop

    loop = _loop(tmp_path, num_steps=10, eval_every=2)
    try:
        assert loop.evaluates(2) and not loop.evaluates(3)
        os.kill(os.getpid(), signal.SIGTERM)
        assert not loop.evaluates(4)
        with pytest.raises(training_loop.TrainingStopped, match=r"saved step 4"):
            loop.save(4, {"w": jnp.ones(3)})
    finally:
        loop.close()
    resumed = _loop(tmp_path, num_steps=10, eval_every=2, start_step=4)
    resumed.write_eval(4, {"accuracy": 0.5})
    resumed.close()
    assert resumed.owes_evaluation
    # Killed before its next save, it left the owed evaluation's row: the next resume, which owes
    # it still, logs it once more in its place, not beside it.
    again = _loop(tmp_path, num_steps=10, eval_every=2, start_step=4)
    again.write_eval(4, {"accuracy": 0.5})
    again.close()
    with open(tmp_path / "metrics.jsonl") as f:
        assert [line for line in f if "eval_" in line] == ['{"step": 4, "eval_accuracy": 0.5}\n']
    # Resumed with another cadence the evaluation is still owed (a review: step 4's weights were
    # never evaluated, so they could never be the best); a run that evaluates nothing owes none.
    for eval_every, owed in ((3, True), (0, False)):
        other = _loop(tmp_path, num_steps=10, eval_every=eval_every, start_step=4)
        other.close()
        assert other.owes_evaluation is owed


def _record_unlogged_steps(loop, last_step: int):
    """Records steps 1..last_step (loss 2.0, none bad) on a loop whose log steps come later: their
    row is written at a stop, or never (the resumed run starts after the saved step). Returns the
    last step's state."""
    import flax
    import jax
    import jax.numpy as jnp

    @flax.struct.dataclass
    class State:
        w: jax.Array
        worst_bad_run: jax.Array
        skipped_steps: jax.Array

    metrics = {"loss": jnp.float32(2.0), "learning_rate": jnp.float32(0.1), "grad_norm": jnp.float32(1.0)}
    state = State(jnp.ones(3), jnp.int32(0), jnp.int32(0))
    for step in range(1, last_step + 1):
        loop.record(step, metrics, state)
    return state


def test_a_terminal_gets_a_line_per_log_step_above_the_live_line(tmp_path, monkeypatch):
    """On a terminal only the live line showed the log steps, so lr, gnorm, MFU and the skipped
    steps never appeared and no loss history stayed on screen (a review); the docs promise a
    line per log step above it."""
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    loop = _loop(tmp_path, num_steps=10, log_every=2)
    try:
        _record_unlogged_steps(loop, 4)
    finally:
        loop.close()
    lines = [line.split("\r\x1b[K")[-1] for line in terminal.getvalue().split("\n")]
    logged = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in logged] == ["2/10", "4/10"] and "lr 1.00e-01 gnorm 1.00" in logged[0]


def _logged(workdir) -> list[tuple[int, float]]:
    """(step, loss) of each row of workdir's metrics.jsonl."""
    return [(row["step"], row["loss"]) for row in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines())]


def test_a_failed_evaluation_saves_its_step_first_and_the_resumed_run_evaluates(tmp_path):
    """An evaluation that fails (out of device memory on its first run, eval_every steps in)
    came before the step's checkpoint: with checkpoint.every = eval_every a run never saved
    anything (a review). The failure saves the step, owing its evaluation, and the steps since
    the last log row (another review: they were lost), and is raised."""
    import jax.numpy as jnp

    from bertjax import checkpointing

    loop = _loop(tmp_path, num_steps=10, log_every=5, eval_every=2)
    try:
        state = _record_unlogged_steps(loop, 2)
        assert loop.evaluates(2)
        with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):
            with loop.evaluation(2, state):
                raise RuntimeError("RESOURCE_EXHAUSTED: out of memory")
    finally:
        loop.close()
    assert checkpointing.read_meta(str(tmp_path / "checkpoints" / "2"))["extra"]["evaluation_owed"]
    assert _logged(tmp_path) == [(2, 2.0)]
    resumed = _loop(tmp_path, num_steps=10, eval_every=2, start_step=2)
    try:
        assert resumed.owes_evaluation
        # Failing again where it resumed: nothing new to save, and the evaluation's own error
        # comes out (TrainingStopped is a RuntimeError too).
        with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED") as failed:
            with resumed.evaluation(2, {"w": jnp.ones(3)}):
                raise RuntimeError("RESOURCE_EXHAUSTED: out of memory")
        assert type(failed.value) is RuntimeError
    finally:
        resumed.close()
    assert checkpointing.Checkpointer(str(tmp_path / "checkpoints"), save_interval_steps=1, max_to_keep=2,
                                      async_save=False).all_steps() == [2]


def test_a_diverged_run_saves_the_weights_it_stopped_with(tmp_path):
    """Non-finite steps never update the weights, so the state where the run stops is good: it
    is saved (fine-tuning's default checkpoint interval is longer than a GLUE run: nothing was)."""
    import flax
    import jax
    import jax.numpy as jnp

    from bertjax import checkpointing, training_loop

    @flax.struct.dataclass
    class State:
        w: jax.Array
        worst_bad_run: jax.Array
        skipped_steps: jax.Array

    loop = _loop(tmp_path, num_steps=100, log_every=5)
    metrics = {"loss": jnp.float32(jnp.nan), "learning_rate": jnp.float32(0.1), "grad_norm": jnp.float32(1.0)}
    try:
        for step in range(1, 5):
            loop.record(step, metrics, State(jnp.ones(3), jnp.int32(step), jnp.int32(step)))
        with pytest.raises(training_loop.TrainingDiverged, match=r"saved at step 5.*run the same command again"):
            loop.record(5, metrics, State(jnp.full(3, 7.0), jnp.int32(5), jnp.int32(5)))
    finally:
        loop.close()
    restored = checkpointing.Checkpointer(str(tmp_path / "checkpoints"), save_interval_steps=1, max_to_keep=2,
                                          async_save=False)
    assert restored.all_steps() == [5]
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one),
                                      State(jnp.zeros(3), jnp.int32(0), jnp.int32(0)))
    state, _ = restored.restore(abstract)
    assert state.w.tolist() == [7.0, 7.0, 7.0]

    # With a stop signal pending the stop wins: a sweep would otherwise go on to its next run,
    # and fine-tuning predict every split inside the grace period. An evaluation step's
    # evaluation is owed to the resumed run.
    loop = _loop(tmp_path / "signalled", num_steps=100, log_every=5, eval_every=5)
    try:
        for step in range(1, 5):
            loop.record(step, metrics, State(jnp.ones(3), jnp.int32(step), jnp.int32(step)))
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(training_loop.TrainingStopped, match=r"preempted \(SIGTERM\): saved step 5") as stopped:
            loop.record(5, metrics, State(jnp.ones(3), jnp.int32(5), jnp.int32(5)))
        assert not isinstance(stopped.value, training_loop.TrainingDiverged)
    finally:
        loop.close()
    assert checkpointing.read_meta(str(tmp_path / "signalled" / "checkpoints" / "5"))["extra"]["evaluation_owed"]

    # At the run's last step no step is left to resume: not resumable, and a relaunch (which
    # trains nothing) says so again, in both stages, rather than finishing as a result.
    loop = _loop(tmp_path / "last", num_steps=5, log_every=5, eval_every=5)
    try:
        for step in range(1, 5):
            loop.record(step, metrics, State(jnp.ones(3), jnp.int32(step), jnp.int32(step)))
        with pytest.raises(training_loop.TrainingDiverged, match=r"saved at step 5\): it was the run's last step, "
                                                                 r"so none is left to resume") as stopped:
            loop.record(5, metrics, State(jnp.ones(3), jnp.int32(5), jnp.int32(5)))
        assert not stopped.value.resumable
    finally:
        loop.close()
    # (its evaluation is not owed: a relaunch would evaluate it, and take it for a result)
    assert not checkpointing.read_meta(str(tmp_path / "last" / "checkpoints" / "5"))["extra"].get("evaluation_owed")
    relaunched = _loop(tmp_path / "last", num_steps=5, start_step=5, eval_every=5)
    try:
        with pytest.raises(training_loop.TrainingDiverged, match=r"stopped at its last step \(5\)") as again:
            relaunched.check_not_diverged()
        assert not again.value.resumable
    finally:
        relaunched.close()


def test_a_signal_during_an_evaluation_stops_it_and_saves_its_step_owing_it(tmp_path):
    """A dev-set evaluation (minutes for SQuAD) was run to its end before a signal that came
    during it was heeded, past a notice's grace period (a review): checked between batches,
    the step is saved, the evaluation owed, and the run stops; the steps since the last log row
    are written first, as at any other stop (another review: they were lost)."""
    from bertjax import checkpointing, training_loop

    loop = _loop(tmp_path, num_steps=10, log_every=5, eval_every=2)
    batches = []
    try:
        state = _record_unlogged_steps(loop, 2)
        assert loop.evaluates(2)
        with pytest.raises(training_loop.TrainingStopped, match=r"preempted \(SIGTERM\) during the evaluation after "
                                                                r"step 2: saved step 2"):
            with loop.evaluation(2, state):
                for batch in range(5):
                    loop.check_stop_during_evaluation(2)
                    batches.append(batch)
                    if batch == 1:
                        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        loop.close()
    assert batches == [0, 1]
    assert checkpointing.read_meta(str(tmp_path / "checkpoints" / "2"))["extra"]["evaluation_owed"]
    assert _logged(tmp_path) == [(2, 2.0)]


def test_processes_told_to_stop_during_an_evaluation_stop_together_within_a_few_batches(tmp_path):
    """Several processes did not look between an evaluation's batches: a SIGTERM to any host
    during a dev-set evaluation waited for its end, the best/ save and one more step, past a
    notice's grace period (a review). They ask each other (a collective, as the feature
    cache's stop does) every COORDINATED_EVALUATION_CHECK batches, and stop together there."""
    from bertjax import checkpointing, training_loop

    loop = _loop(tmp_path, num_steps=10, log_every=5, eval_every=2)
    every = training_loop.COORDINATED_EVALUATION_CHECK
    batches, asked = [], []
    loop.watcher.coordinated = True  # as under jax.distributed: a notice is every host's, once asked
    loop.watcher.stop_in_step = lambda: asked.append(len(batches)) or ("SIGTERM" if len(batches) > every + 1 else None)
    try:
        state = _record_unlogged_steps(loop, 2)
        with pytest.raises(training_loop.TrainingStopped, match=r"preempted \(SIGTERM\) during the evaluation after "
                                                                r"step 2: saved step 2"):
            with loop.evaluation(2, state):
                for batch in range(5 * every):
                    loop.check_stop_during_evaluation(2)
                    batches.append(batch)
    finally:
        loop.watcher.coordinated = False
        loop.close()
    assert asked == [every - 1, 2 * every - 1] and batches == list(range(2 * every - 1))
    assert checkpointing.read_meta(str(tmp_path / "checkpoints" / "2"))["extra"]["evaluation_owed"]


def test_a_signal_during_an_evaluation_stops_at_its_step(tmp_path):
    """The question 'stop here?' is asked before an evaluation and again at the save: a signal
    that came in between stops the run at that step, not one later (a review of the above)."""
    import jax.numpy as jnp

    from bertjax import training_loop

    loop = _loop(tmp_path, num_steps=10, eval_every=2)
    try:
        assert loop.evaluates(2)
        os.kill(os.getpid(), signal.SIGTERM)  # during the evaluation
        with pytest.raises(training_loop.TrainingStopped, match=r"saved step 2"):
            loop.save(2, {"w": jnp.ones(3)})
    finally:
        loop.close()
