"""Resumable training: fit_regressor(checkpoint=...) killed after any epoch or signalled mid-epoch, then rerun, ends
bit-identical to an uninterrupted run; foreign checkpoints are refused; writes are atomic."""

import contextlib
import json
import logging
import os
import signal
from pathlib import Path

import pytest
import torch

from stochattn.backbones.ft_transformer import build_ft_transformer
from stochattn.baselines.ivon import ivon_step, make_ivon
from stochattn.experiments import adapters, era5, ett, uci
from stochattn.training import TrainingInterrupted, fit_regressor, predict, standard_step

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def every_epoch_saved(monkeypatch):
    """A save at every epoch's end, whatever the saves cost next to the epochs (see the test of the share below)."""
    monkeypatch.setattr("stochattn.training._SAVE_SHARE", None)

# lr 0.1 makes the validation curve noisy: early stopping at epoch 8 of 12, best epoch 6 (checked below)
SETTINGS = dict(seed=0, lr=0.1, batch_size=32, max_epochs=12, patience=2, progress=False)
STEPS = 7  # optimisation steps per epoch: 200 training rows in batches of 32


class Killed(Exception):
    """Stands for a SIGKILL: the process ends without saving anything."""


class Step:
    """standard_step that counts its calls; at call ``signal_at`` (after the step) it sends this process
    ``signum``, at call ``kill_at`` (before the step) it raises Killed."""

    def __init__(self, signal_at=None, kill_at=None, signum=signal.SIGUSR1, inner=standard_step):
        self.signal_at, self.kill_at, self.signum, self.calls = signal_at, kill_at, signum, 0
        self.inner = inner

    def __call__(self, model, optimizer, x, y, loss):
        self.calls += 1
        if self.calls == self.kill_at:
            raise Killed
        out = self.inner(model, optimizer, x, y, loss)
        if self.calls == self.signal_at:
            os.kill(os.getpid(), self.signum)
        return out


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 3, generator=g)
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(300, generator=g)
    return x[:200], y[:200], x[200:], y[200:]


def tiny(d_block=8):
    return build_ft_transformer(3, n_blocks=1, d_block=d_block, attention_n_heads=2, seed=0)  # dropout on


def fit(step, checkpoint=None, model=None, **overrides):
    model = tiny() if model is None else model
    result = fit_regressor(model, *data(), step_fn=step, checkpoint=checkpoint, **{**SETTINGS, **overrides})
    return model, result


def record(result):
    return (result.best_epoch, result.best_val_rmse, result.epochs_run, result.stopped_early, result.history)


def assert_identical(model_a, result_a, model_b, result_b):
    a, b = model_a.state_dict(), model_b.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert record(result_a) == record(result_b)
    assert same(result_a.optimizer.state_dict(), result_b.optimizer.state_dict())
    assert getattr(result_a.optimizer, "current_step", None) == getattr(result_b.optimizer, "current_step", None)


def same(a, b):
    """Equal, tensors bit for bit, inside nested dicts / lists / tuples."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def assert_completed(ckpt):
    """A fit that returned leaves its final state in its checkpoint, marked completed (the workflow deletes it once
    the job's outputs are accepted)."""
    assert ckpt.exists() and torch.load(ckpt, weights_only=True)["completed"] is True


@pytest.fixture
def reference():
    step = Step()
    model, result = fit(step)
    assert result.stopped_early and result.best_epoch < result.epochs_run - 1  # the best-so-far record matters
    return model, result, step.calls


@pytest.mark.parametrize(
    "signal_at, signum",
    [(3, signal.SIGUSR1), (STEPS, signal.SIGUSR1), (5 * STEPS + 4, signal.SIGTERM), (7 * STEPS + 2, signal.SIGUSR1)],
    ids=["epoch1-step3", "epoch1-last-step", "epoch6-step4-sigterm", "epoch8-step2"],
)
def test_resume_from_a_signal_mid_epoch_is_bit_identical(reference, tmp_path, signal_at, signum):
    ref_model, ref_result, ref_calls = reference
    ckpt = tmp_path / "fit.ckpt"
    handlers = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    with pytest.raises(TrainingInterrupted) as info:
        fit(Step(signal_at=signal_at, signum=signum), ckpt)
    epoch, step = divmod(signal_at - 1, STEPS)
    assert (info.value.epoch, info.value.step, info.value.signum) == (epoch + 1, step + 1, signum)
    assert ckpt.exists() and {s: signal.getsignal(s) for s in handlers} == handlers  # handlers put back
    resumed = Step()
    model, result = fit(resumed, ckpt)
    assert resumed.calls == ref_calls - signal_at  # continued, not restarted
    assert_identical(ref_model, ref_result, model, result)
    assert_completed(ckpt)


@pytest.mark.parametrize("epochs_done", [1, 6])
def test_resume_after_a_kill_is_bit_identical(reference, tmp_path, epochs_done):
    """A kill without warning in epoch ``epochs_done + 1`` leaves the state saved at the end of ``epochs_done``."""
    ref_model, ref_result, ref_calls = reference
    ckpt = tmp_path / "fit.ckpt"
    with pytest.raises(Killed):
        fit(Step(kill_at=epochs_done * STEPS + 3), ckpt)
    resumed = Step()
    model, result = fit(resumed, ckpt)
    assert resumed.calls == ref_calls - epochs_done * STEPS
    assert_identical(ref_model, ref_result, model, result)
    assert_completed(ckpt)


def test_a_completed_fit_rerun_returns_its_final_state_without_training(reference, tmp_path, caplog):
    """A job killed after its fit ended (SLURM's time limit in Snakemake's teardown) is retried: the same call meets
    the completed checkpoint and returns the same model, optimizer and result without one optimisation step."""
    ref_model, ref_result, ref_calls = reference
    ckpt = tmp_path / "fit.ckpt"
    first = Step()
    _, first_result = fit(first, ckpt)
    assert first.calls == ref_calls
    caplog.set_level(logging.INFO, logger="stochattn.training")
    again = Step()
    model, result = fit(again, ckpt)
    assert again.calls == 0
    assert_identical(ref_model, ref_result, model, result)
    assert result.seconds == first_result.seconds  # the training's own time, not the rerun's
    assert any(m.startswith(f"training already completed in {ckpt}: best epoch {ref_result.best_epoch} of "
                            f"{ref_result.epochs_run}") for m in caplog.messages)  # fmt: skip
    with pytest.raises(ValueError, match="written by a different training"):  # another training never reuses it
        fit(Step(), ckpt, lr=0.05)


def test_ivon_resumes_bit_identical(tmp_path):
    """IVON: its Hessian estimate (in the state_dict) and its step counter (outside it) are restored."""
    settings = dict(optimizer=lambda m: make_ivon(m, lr=0.1, ess=200.0, hess_init=1.0), max_epochs=4, patience=None)
    ref_model, ref_result = fit(Step(inner=ivon_step(1)), **settings)
    ckpt = tmp_path / "fit.ckpt"
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=STEPS + 3, inner=ivon_step(1)), ckpt, **settings)
    assert_identical(ref_model, ref_result, *fit(Step(inner=ivon_step(1)), ckpt, **settings))


class NoisyMLP(torch.nn.Module):
    """Draws training noise from its own generator (as HSA / Contextual Dropout modules may)."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.generator = torch.Generator().manual_seed(5)

    def forward(self, x):
        return self.net(x + torch.randn(x.shape, generator=self.generator) if self.training else x)


def test_module_generators_are_restored(tmp_path):
    torch.manual_seed(0)
    ref_model, ref_result = fit(Step(), model=NoisyMLP(), max_epochs=3, patience=None)
    ckpt = tmp_path / "fit.ckpt"
    torch.manual_seed(0)
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=STEPS + 3), ckpt, model=NoisyMLP(), max_epochs=3, patience=None)
    torch.manual_seed(0)
    assert_identical(ref_model, ref_result, *fit(Step(), ckpt, model=NoisyMLP(), max_epochs=3, patience=None))


def test_checkpoint_refuses_an_epoch_hook(tmp_path):
    with pytest.raises(ValueError, match="on_epoch_end"):
        fit(Step(), tmp_path / "fit.ckpt", on_epoch_end=lambda epoch, model: None)


def test_a_diverged_fit_removes_its_checkpoint(tmp_path):
    """FloatingPointError is a final outcome (a rerun would end the same way): no checkpoint is left behind. A NaN
    loss with a best epoch to fall back on returns, and keeps its completed state like any fit that returns."""
    ckpt, seen = tmp_path / "fit.ckpt", []

    def nan_in_epoch_3(model, optimizer, x, y, loss):
        seen.append(ckpt.exists())
        out = standard_step(model, optimizer, x, y, loss)
        return out * float("nan") if len(seen) > 2 * STEPS else out

    with pytest.warns(UserWarning, match="training loss became nan in epoch 3"):
        fit(Step(inner=nan_in_epoch_3), ckpt)  # falls back on the best epoch: returns, its state kept as completed
    assert seen[2 * STEPS]  # saved after epoch 2
    assert_completed(ckpt)
    ckpt.unlink()
    seen.clear()
    with pytest.raises(FloatingPointError):
        fit(Step(inner=nan_in_epoch_3), ckpt, restore_best=False)
    assert seen[2 * STEPS] and not ckpt.exists()


def test_resume_is_logged(tmp_path, caplog):
    ckpt = tmp_path / "fit.ckpt"
    caplog.set_level(logging.INFO, logger="stochattn.training")
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=STEPS + 3), ckpt)
    assert f"received SIGUSR1 at epoch 2 step 3: state saved to {ckpt}" in caplog.messages
    caplog.clear()
    with pytest.raises(Killed):
        fit(Step(kill_at=STEPS - 3 + 1), ckpt)  # epoch 2 completes (and is saved), then a kill in epoch 3
    (line,) = [m for m in caplog.messages if m.startswith("resuming from")]
    assert line.startswith(f"resuming from {ckpt}: after epoch 2 step 3 of max 12 (best epoch 1, val RMSE ")
    caplog.clear()
    fit(Step(), ckpt)
    (line,) = [m for m in caplog.messages if m.startswith("resuming from")]
    assert line.startswith(f"resuming from {ckpt}: after epoch 2 of max 12 (best epoch ")


@pytest.mark.parametrize(
    "change, named",
    [(dict(lr=0.05), "lr"), (dict(model=tiny(d_block=12)), "model"), (dict(seed=1), "seed"),
     (dict(max_epochs=13), "max_epochs")],
)
def test_foreign_checkpoint_is_refused_and_kept(tmp_path, change, named):
    ckpt = tmp_path / "fit.ckpt"
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=10), ckpt)
    saved = ckpt.read_bytes()
    with pytest.raises(ValueError, match=rf"checkpoint .*fit\.ckpt: written by a different training; mismatch in .*"
                                         rf"\b{named} \(checkpoint "):  # fmt: skip
        fit(Step(), ckpt, **change)
    assert ckpt.read_bytes() == saved


def test_a_failed_write_leaves_the_previous_checkpoint(reference, tmp_path, monkeypatch):
    ref_model, ref_result, _ = reference
    ckpt = tmp_path / "fit.ckpt"
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=10), ckpt)  # epoch 2, step 3
    saved = ckpt.read_bytes()

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(torch, "save", broken_save)
        with pytest.raises(OSError, match="disk full"):
            fit(Step(), ckpt)  # fails saving the end of epoch 2
    assert ckpt.read_bytes() == saved and os.listdir(tmp_path) == ["fit.ckpt"]  # no temporary file left
    assert_identical(ref_model, ref_result, *fit(Step(), ckpt))


def test_without_checkpoint_no_signal_handler_is_installed(tmp_path):
    seen = []

    def step(*args):
        seen.append(signal.getsignal(signal.SIGUSR1))
        return standard_step(*args)

    before = signal.getsignal(signal.SIGUSR1)
    fit(step, max_epochs=1)
    fit(step, tmp_path / "fit.ckpt", max_epochs=1)
    assert seen[0] is before and seen[-1] is not before and signal.getsignal(signal.SIGUSR1) is before


# ----------------------------------------------------------------------------------------------------------------
# the experiment functions pass checkpoint= on to fit_regressor
# ----------------------------------------------------------------------------------------------------------------


def test_uci_backbone_resumes(tmp_path, monkeypatch):
    uci.prepare_sinusoid(tmp_path / "prepared.npz", n=160, seed=0)
    model, train = dict(n_blocks=1, d_block=8, attention_n_heads=2), dict(max_epochs=4, lr=1e-2, batch_size=16)

    def run(name, step, checkpoint=None):
        monkeypatch.setattr("stochattn.training.standard_step", step)  # the default step_fn of fit_regressor
        meta = uci.train_backbone(tmp_path / "prepared.npz", tmp_path / name / "model.pt", tmp_path / name / "m.json",
                                  model=model, train=train, seed=0, progress=False, checkpoint=checkpoint)  # fmt: skip
        return meta, torch.load(tmp_path / name / "model.pt", weights_only=True)["state_dict"]

    ref_meta, ref_state = run("ref", Step())
    ckpt = tmp_path / "resumed" / "backbone.ckpt"
    with pytest.raises(TrainingInterrupted):
        run("resumed", Step(signal_at=9), ckpt)
    meta, state = run("resumed", Step(), ckpt)
    assert all(torch.equal(ref_state[k], state[k]) for k in ref_state)
    assert (meta["best_epoch"], meta["epochs_run"], meta["val_rmse_standardised"]) == (
        ref_meta["best_epoch"], ref_meta["epochs_run"], ref_meta["val_rmse_standardised"])  # fmt: skip
    assert_completed(ckpt)


def test_fit_adapter_resumes(tmp_path, monkeypatch):
    xt, yt, xv, yv = (t.numpy() for t in data())
    d = {"x_train": xt, "y_train": yt, "x_val": xv, "y_val": yv}
    train = dict(lr=0.1, batch_size=32, max_epochs=5, patience=2)
    ckpt = tmp_path / "adapter.ckpt"

    def run(step, checkpoint=None):
        monkeypatch.setattr("stochattn.training.standard_step", step)
        net = tiny()
        rec = adapters.fit_adapter(net, d, train, seed=0, progress=False, desc="", checkpoint=checkpoint)
        return net, {k: v for k, v in rec.items() if k != "seconds"}

    ref_net, ref = run(Step())
    with pytest.raises(TrainingInterrupted):
        run(Step(signal_at=12), ckpt)
    net, rec = run(Step(), ckpt)
    assert rec == ref and all(torch.equal(a, b) for a, b in zip(ref_net.parameters(), net.parameters()))
    assert_completed(ckpt)


class Reached(Exception):
    pass


def _capture_fit_adapter(monkeypatch):
    def fake(*args, **kwargs):
        raise Reached(kwargs["checkpoint"])

    monkeypatch.setattr(adapters, "fit_adapter", fake)


def test_ett_and_era5_adapt_pass_the_checkpoint_on(tmp_path, monkeypatch):
    _capture_fit_adapter(monkeypatch)
    monkeypatch.setattr(ett, "load_windows", lambda path: {})
    monkeypatch.setattr(ett, "lora_forecaster", lambda *args: None)
    with pytest.raises(Reached) as info:
        ett.adapt("p.npz", "bb.pt", "a.pt", dataset="ETTh1", horizon=96, lora={}, train={}, seed=0,
                  checkpoint=tmp_path / "ett.ckpt")  # fmt: skip
    assert info.value.args == (tmp_path / "ett.ckpt",)
    monkeypatch.setattr(era5, "load_pairs", lambda path: {})
    monkeypatch.setattr(era5, "load_json", lambda path: {"variables": ["z500"], "lead_hours": 72})
    monkeypatch.setattr(era5, "lora_forecaster", lambda *args: None)
    with pytest.raises(Reached) as info:
        era5.adapt("p.npz", "bb.pt", "a.pt", lora={}, train={}, seed=0, checkpoint=tmp_path / "era5.ckpt")
    assert info.value.args == (tmp_path / "era5.ckpt",)
    with pytest.raises(Reached) as info:
        era5.adapt("p.npz", "bb.pt", "a.pt", lora={}, train={}, seed=0)
    assert info.value.args == (None,)


def test_resumable_block_checkpoints_each_fit_inside_it_in_order(tmp_path):
    """stochattn.training.resumable: fits deep inside a job (a grid candidate's) checkpoint to numbered files in
    call order; a second fit interrupted mid-epoch resumes from its own file on the rerun, after the first returns
    its completed state without training, and both end bit-identical to uninterrupted fits."""
    from stochattn.training import resumable

    def job(first_step, second_step):
        with resumable(tmp_path / "job.pt"):
            first = fit(first_step, model=tiny(), max_epochs=3)
            second = fit(second_step, model=tiny(d_block=16))
        return first, second

    (ref_a, res_a), (ref_b, res_b) = job(Step(), Step())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.0.pt", "job.1.pt"]
    for path in tmp_path.iterdir():  # what the workflow does once the job's outputs are accepted
        assert_completed(path)
        path.unlink()
    with pytest.raises(TrainingInterrupted) as info:
        job(Step(), Step(signal_at=STEPS * 3 + 2))
    assert info.value.checkpoint == tmp_path / "job.1.pt" and info.value.epoch == 4
    first, second = Step(), Step()
    (a, ra), (b, rb) = job(first, second)
    assert first.calls == 0 and second.calls > 0
    assert_identical(ref_a, res_a, a, ra)
    assert_identical(ref_b, res_b, b, rb)


def test_a_training_clock_counts_the_training_its_fits_resume(tmp_path):
    """TrainingClock around a fit that resumes: its seconds are this attempt's wall clock plus the training the
    checkpoint holds, so at least the resumed fit's own clock; around a fit found completed, at least its whole
    training, though the call trains nothing; without a checkpoint, the wall clock."""
    from stochattn.training import TrainingClock

    ckpt = tmp_path / "fit.ckpt"
    with pytest.raises(TrainingInterrupted), TrainingClock() as first:
        fit(Step(signal_at=3 * STEPS + 2), ckpt)
    saved = torch.load(ckpt, weights_only=True)["seconds"]
    assert first.loaded == 0.0 and first.seconds() >= saved > 0
    with TrainingClock() as second:
        _, result = fit(Step(), ckpt)
    assert second.loaded == saved and second.seconds() >= result.seconds > saved
    step = Step()
    with TrainingClock() as third:
        fit(step, ckpt)
    assert step.calls == 0 and third.loaded == result.seconds and third.seconds() >= result.seconds
    with TrainingClock() as outer, TrainingClock() as inner:  # nested blocks both count a resumed fit
        fit(Step(), ckpt)
    assert outer.loaded == inner.loaded == result.seconds
    with TrainingClock() as plain:
        fit(Step(), max_epochs=1)
    assert plain.loaded == 0.0


def test_a_checkpoint_without_cpu_time_leaves_the_fits_cpu_time_unknown(tmp_path):
    """A fit resumed from a checkpoint written before checkpoints kept the CPU time keeps it unknown (None) in its
    later saves, rather than counting the new attempts' alone; the wall clock goes on. The same fit from a current
    checkpoint keeps counting it."""
    from stochattn.training import saved_training_time

    ckpt = tmp_path / "fit.ckpt"
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=2 * STEPS + 1), ckpt)
    assert saved_training_time(ckpt)[1] > 0
    old = torch.load(ckpt, weights_only=True)
    torch.save({k: v for k, v in old.items() if k != "cpu_seconds"}, ckpt)
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=2 * STEPS + 1), ckpt)
    wall, cpu = saved_training_time(ckpt)
    assert cpu is None and wall > old["seconds"]


def test_a_resumed_candidates_seconds_count_its_earlier_attempts(tmp_path):
    """stochattn.selection.fit_candidate (a grid candidate's record, which a method's train seconds sum): a candidate
    stopped near the end of its training and resumed records the stopped attempt's training too, not only the last
    steps its own attempt ran."""
    from stochattn.selection import CandidateFit, ValidationSplit, fit_candidate

    x, y, xv, yv = (t.numpy() for t in data())
    split = ValidationSplit(x, y, xv, yv)
    ckpt = tmp_path / "candidate.ckpt"

    def candidate(step):
        def fit_one(c, split):
            model, _ = fit(step, ckpt, max_epochs=6, patience=None)
            return CandidateFit(model, predict(model, split.x_val))

        return fit_candidate("toy", {}, fit_one, split, metric="rmse")[1]

    with pytest.raises(TrainingInterrupted):
        candidate(Step(signal_at=6 * STEPS - 1))
    saved = torch.load(ckpt, weights_only=True)["seconds"]
    last = Step()
    entry = candidate(last)
    assert last.calls == 1 and entry["seconds"] > saved > 0


def test_a_resumed_job_records_the_training_its_earlier_attempts_saved(tmp_path):
    """stochattn.provenance.resume_checkpoint, in a job whose rule declares the ``attempts`` log: before the job
    trains, it writes the seconds its checkpoint files hold (a completed fit's whole training, an interrupted fit's so
    far; files of other jobs and unreadable ones not counted), once per job; the resumed fit's clock continues from
    them; a first attempt writes 0."""
    from types import SimpleNamespace

    from stochattn.provenance import resume_checkpoint
    from stochattn.training import resumable, saved_training_time

    def sm(record=None):
        return SimpleNamespace(params={"seed": 1}, output=[str(tmp_path / "out.pt")], rule="uci_candidate",
                               wildcards={"dataset": "naval", "split": "0"},
                               log=SimpleNamespace(attempts=record) if record else ["job.log"])  # fmt: skip

    ckpt = resume_checkpoint(sm())
    assert saved_training_time(ckpt) == (0.0, 0.0)
    first = tmp_path / "first.json"
    assert resume_checkpoint(sm(first)) == ckpt  # nothing saved: a first attempt
    assert json.loads(first.read_text())["earlier_seconds"] == json.loads(first.read_text())["earlier_cpu_seconds"] == 0

    def job(second_step):
        with resumable(ckpt):
            fit(Step(), model=tiny(), max_epochs=3)
            return fit(second_step, model=tiny(d_block=16))[1]

    with pytest.raises(TrainingInterrupted):
        job(Step(signal_at=STEPS * 3 + 2))
    done, partial = (torch.load(ckpt.with_name(f"{ckpt.stem}.{i}.pt"), weights_only=True) for i in (0, 1))
    saved, cpu = done["result"]["seconds"] + partial["seconds"], done["cpu_seconds"] + partial["cpu_seconds"]
    assert done["completed"] and not partial.get("completed") and partial["seconds"] > 0 and partial["cpu_seconds"] > 0
    (tmp_path / f"{ckpt.stem}.2.pt").write_bytes(b"half a checkpoint")  # unreadable: counts 0
    torch.save({"seconds": 1e6}, tmp_path / f"{ckpt.stem}.1.pt.corrupt")  # not a fit's file
    torch.save({"seconds": 1e6}, tmp_path / ".other.pt.resume-0123456789ab.0.pt")  # another job's
    assert saved_training_time(ckpt) == pytest.approx((saved, cpu))

    record = tmp_path / "bench" / "split0.attempts.json"
    assert resume_checkpoint(sm(record)) == ckpt
    written = json.loads(record.read_text())
    assert written["earlier_seconds"] == pytest.approx(saved) and written["rule"] == "uci_candidate"
    assert written["earlier_cpu_seconds"] == pytest.approx(cpu)
    assert written["wildcards"] == {"dataset": "naval", "split": "0"} and written["checkpoint"] == ckpt.name
    (tmp_path / f"{ckpt.stem}.2.pt").unlink()
    result = job(Step())
    assert result.seconds > partial["seconds"]  # the fit's clock went on from the saved seconds
    resume_checkpoint(sm(record))  # a later call in the same job: its own saves are not earlier attempts
    assert json.loads(record.read_text())["earlier_seconds"] == pytest.approx(saved)


# ----------------------------------------------------------------------------------------------------------------
# stop requests in the validation and at the epoch's end; hooks with state (SWAG's phase); IVON
# ----------------------------------------------------------------------------------------------------------------
VAL_BATCHES = 4  # validation batches per epoch: 100 rows in batches of 25


def signal_in_eval(model, at, signum=signal.SIGUSR1):
    """Send ``signum`` to this process during the model's ``at``-th eval-mode forward pass (1-based)."""
    calls = []

    def hook(module, args, out):
        if not module.training:
            calls.append(1)
            if len(calls) == at:
                os.kill(os.getpid(), signum)

    model.register_forward_hook(hook)
    return calls


class Epochs:
    """An ``on_epoch_end`` hook with state (:class:`stochattn.training.HookState`): the epochs it saw."""

    settings = "epochs"

    def __init__(self):
        self.seen = []

    def __call__(self, epoch, model):
        self.seen.append(epoch)

    def state_dict(self):
        return {"seen": list(self.seen)}

    def load_state_dict(self, state):
        self.seen = list(state["seen"])


@pytest.mark.parametrize("at", [VAL_BATCHES + 2, 5 * VAL_BATCHES + 1], ids=["epoch2-batch2", "epoch6-batch1"])
def test_a_signal_during_validation_is_honoured_and_resumed_without_training_again(reference, tmp_path, at):
    """SIGUSR1 in the validation: the fit stops before the next validation batch (not at the next training step),
    and the rerun neither trains that epoch again nor calls on_epoch_end twice; it ends bit-identical."""
    ref_model, ref_result, ref_calls = reference
    ckpt, hooks, ref_hooks = tmp_path / "fit.ckpt", Epochs(), Epochs()
    fit(Step(), model=tiny(), eval_batch_size=25, on_epoch_end=ref_hooks)  # without a checkpoint: no hook state
    model, step = tiny(), Step()
    signal_in_eval(model, at)
    with pytest.raises(TrainingInterrupted) as info:
        fit(step, ckpt, model=model, eval_batch_size=25, on_epoch_end=hooks, hook_state=hooks)
    epoch, validated = divmod(at - 1, VAL_BATCHES)
    assert (info.value.epoch, info.value.step, info.value.validated) == (epoch + 1, STEPS, validated + 1)
    assert step.calls == (epoch + 1) * STEPS  # stopped inside the validation, before any further training step
    assert "in the validation of epoch" in str(info.value)
    resumed, hooks = Step(), Epochs()
    model = tiny()
    evals = signal_in_eval(model, 0)  # counts the eval passes only
    model, result = fit(resumed, ckpt, model=model, eval_batch_size=25, on_epoch_end=hooks, hook_state=hooks)
    assert resumed.calls == ref_calls - (epoch + 1) * STEPS  # the interrupted epoch's training is not redone
    assert len(evals) == ref_result.epochs_run * VAL_BATCHES - at  # nor its validation's batches done
    assert hooks.seen == ref_hooks.seen == list(range(1, ref_result.epochs_run + 1))  # each epoch's hook once
    assert_identical(ref_model, ref_result, model, result)


def test_a_signal_in_the_last_validation_batch_stops_at_the_epoch_end(reference, tmp_path):
    ref_model, ref_result, ref_calls = reference
    ckpt, model = tmp_path / "fit.ckpt", tiny()
    signal_in_eval(model, 2 * VAL_BATCHES)
    with pytest.raises(TrainingInterrupted) as info:
        fit(Step(), ckpt, model=model, eval_batch_size=25)
    assert (info.value.epoch, info.value.step) == (3, 0)  # after epoch 2, saved at its end
    resumed = Step()
    model, result = fit(resumed, ckpt, eval_batch_size=25)
    assert resumed.calls == ref_calls - 2 * STEPS
    assert_identical(ref_model, ref_result, model, result)


def test_an_epoch_hook_with_state_is_checkpointed_even_in_a_resumable_block(tmp_path):
    """on_epoch_end without hook_state is refused with a checkpoint and left out of resumable blocks; with it, the
    hook's state is saved, also in the completed state a rerun returns."""
    from stochattn.training import resumable

    with pytest.raises(ValueError, match="hook_state"):
        fit(Step(), tmp_path / "fit.ckpt", on_epoch_end=lambda epoch, model: None)
    with resumable(tmp_path / "job.pt"):
        fit(Step(), max_epochs=2, on_epoch_end=lambda epoch, model: None)
    assert not list(tmp_path.iterdir())
    hooks = Epochs()
    with resumable(tmp_path / "job.pt"):
        fit(Step(), max_epochs=2, on_epoch_end=hooks, hook_state=hooks)
    assert_completed(tmp_path / "job.0.pt") and hooks.seen == [1, 2]
    again, hooks = Step(), Epochs()
    with resumable(tmp_path / "job.pt"):
        fit(again, max_epochs=2, on_epoch_end=hooks, hook_state=hooks)
    assert again.calls == 0 and hooks.seen == [1, 2]  # restored from the completed state


class Other(Epochs):
    settings = "other"


def test_a_checkpoint_of_other_hook_settings_is_refused(tmp_path):
    ckpt, hooks = tmp_path / "fit.ckpt", Epochs()
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=10), ckpt, on_epoch_end=hooks, hook_state=hooks)
    with pytest.raises(ValueError, match="mismatch in hooks"):
        fit(Step(), ckpt, on_epoch_end=hooks, hook_state=Other())


# SWAG: 200 rows in batches of 32 (7 steps per epoch), 1 annealing epoch of AdamW (SWALR), 3 collection epochs of 3
# snapshots each (steps 2, 4 and 7 of an epoch)
SWAG_SETTINGS = dict(lr=1e-3, epochs=3, seed=1, max_rank=4, optimizer="adamw", anneal_epochs=1, start_lr=1e-2,
                     collect_per_epoch=3, batch_size=32, progress=False)  # fmt: skip


def fit_swag_run(monkeypatch, step, checkpoint=None, validation=False, model=None):
    from stochattn.baselines.swag import fit_swag

    monkeypatch.setattr("stochattn.baselines.swag.standard_step", step)
    xt, yt, xv, yv = data()
    model = tiny() if model is None else model
    val = dict(x_val=xv, y_val=yv) if validation else {}
    swag = fit_swag(model, xt, yt, checkpoint=checkpoint, **val, **SWAG_SETTINGS)
    return model, swag


def assert_same_posterior(ref, other):
    (ref_model, ref_swag), (model, swag) = ref, other
    assert same(ref_swag.state_dict(), swag.state_dict())  # mean, second moment, deviations, count
    assert same(ref_swag.trajectory, swag.trajectory)
    assert all(torch.equal(a, b) for a, b in zip(ref_model.state_dict().values(), model.state_dict().values()))


@pytest.mark.parametrize("signal_at", [3, STEPS + 4, 2 * STEPS, 3 * STEPS + 6],
                         ids=["annealing", "epoch2-snapshot", "epoch2-last-step", "epoch4-step6"])  # fmt: skip
def test_a_swag_phase_signalled_mid_epoch_resumes_to_the_same_posterior(monkeypatch, tmp_path, signal_at):
    ref = fit_swag_run(monkeypatch, Step())
    assert ref[1].n_collected == 9 and ref[1].rank == 4
    ckpt = tmp_path / "swag.ckpt"
    with pytest.raises(TrainingInterrupted) as info:
        fit_swag_run(monkeypatch, Step(signal_at=signal_at), ckpt)
    assert info.value.epoch == (signal_at - 1) // STEPS + 1
    resumed = Step()
    assert_same_posterior(ref, fit_swag_run(monkeypatch, resumed, ckpt))
    assert resumed.calls == 4 * STEPS - signal_at
    assert_completed(ckpt)
    again = Step()
    assert_same_posterior(ref, fit_swag_run(monkeypatch, again, ckpt))  # the completed phase: nothing trained
    assert again.calls == 0


@pytest.mark.parametrize("validation", [False, True], ids=["no-validation", "validation"])
def test_a_swag_phase_signalled_at_an_epoch_end_resumes_to_the_same_posterior(monkeypatch, tmp_path, validation):
    """A signal in the epoch-end hook (the annealing's scheduler step at the end of epoch 2) is seen before the
    validation's first batch, or, without validation data, as soon as the epoch is saved; the rerun does not step
    the schedule again (the trajectory's rates would differ)."""
    from torch.optim.swa_utils import SWALR

    ref = fit_swag_run(monkeypatch, Step())
    if validation:
        assert_same_posterior(ref, fit_swag_run(monkeypatch, Step(), validation=True))  # it only fills the history
    ckpt, calls, scheduler_step = tmp_path / "swag.ckpt", [], SWALR.step

    def signalling(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # its constructor's step, the end of epochs 1 and 2
            os.kill(os.getpid(), signal.SIGUSR1)
        return scheduler_step(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(SWALR, "step", signalling)
        with pytest.raises(TrainingInterrupted) as info:
            fit_swag_run(monkeypatch, Step(), ckpt, validation=validation)
    where = (info.value.epoch, info.value.step, info.value.validated)
    assert where == ((2, STEPS, 0) if validation else (3, 0, None))
    resumed = Step()
    assert_same_posterior(ref, fit_swag_run(monkeypatch, resumed, ckpt, validation=validation))
    assert resumed.calls == 2 * STEPS


def test_ivon_signalled_in_its_validation_resumes_bit_identical(tmp_path):
    """IVON (its weight noise from the global RNG, its Hessian estimate in the optimizer) stopped in a validation:
    before its next batch, or at the epoch's end after the last one (fit_ivon: one validation batch per epoch)."""
    from stochattn.baselines.ivon import fit_ivon

    settings = dict(optimizer=lambda m: make_ivon(m, lr=0.1, ess=200.0, hess_init=1.0), max_epochs=4, patience=None,
                    eval_batch_size=25)  # fmt: skip
    ref_model, ref_result = fit(Step(inner=ivon_step(1)), **settings)
    model, ckpt = tiny(), tmp_path / "fit.ckpt"
    signal_in_eval(model, VAL_BATCHES + 3)
    with pytest.raises(TrainingInterrupted) as info:
        fit(Step(inner=ivon_step(1)), ckpt, model=model, **settings)
    assert (info.value.epoch, info.value.validated) == (2, 3)
    assert_identical(ref_model, ref_result, *fit(Step(inner=ivon_step(1)), ckpt, **settings))

    def run(checkpoint=None, at=None):
        model = tiny()
        if at is not None:
            signal_in_eval(model, at)
        result = fit_ivon(model, *data(), lr=0.1, seed=0, ess=200.0, batch_size=32, max_epochs=4, patience=None,
                          progress=False, checkpoint=checkpoint)  # fmt: skip
        return model, result

    ref_model, ref_result = run()
    ckpt = tmp_path / "ivon.ckpt"
    with pytest.raises(TrainingInterrupted) as info:
        run(ckpt, at=2)  # epoch 2's validation (one batch): seen at the end of epoch 2
    assert (info.value.epoch, info.value.step, info.value.validated) == (3, 0, None)
    assert_identical(ref_model, ref_result, *run(ckpt))


# ----------------------------------------------------------------------------------------------------------------
# a damaged checkpoint and the temporary files of a save cut short
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0, 100, 0.5, -10], ids=["empty", "head", "half", "tail-cut"])
def test_a_truncated_checkpoint_is_set_aside_and_the_fit_starts_afresh(reference, tmp_path, keep):
    ref_model, ref_result, ref_calls = reference
    ckpt = tmp_path / "fit.ckpt"
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=10), ckpt)
    whole = ckpt.read_bytes()
    cut = whole[: int(len(whole) * keep) if isinstance(keep, float) else keep]
    ckpt.write_bytes(cut)
    step = Step()
    with pytest.warns(UserWarning, match=rf"checkpoint {ckpt}: unreadable \(.*\); set aside as fit\.ckpt\.corrupt"):
        model, result = fit(step, ckpt)
    assert step.calls == ref_calls  # from the start
    assert_identical(ref_model, ref_result, model, result)
    assert (tmp_path / "fit.ckpt.corrupt").read_bytes() == cut
    assert_completed(ckpt)


def test_an_unreadable_checkpoint_for_another_reason_is_kept_and_named(tmp_path, monkeypatch):
    ckpt = tmp_path / "fit.ckpt"
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=10), ckpt)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(torch, "load", denied)
    with pytest.raises(PermissionError) as info:
        fit(Step(), ckpt)
    assert f"reading the checkpoint {ckpt}" in info.value.__notes__ and ckpt.exists()


def test_the_temporary_files_of_a_save_cut_short_are_removed_at_the_next_start(reference, tmp_path):
    """A kill in the middle of a checkpoint's save leaves stochattn.io.atomic_path's temporary file; the next start
    of the same training removes it (not those of other files)."""
    from stochattn.io import atomic_path

    ref_model, ref_result, _ = reference
    ckpt = tmp_path / "fit.ckpt"
    with pytest.raises(TrainingInterrupted):
        fit(Step(signal_at=10), ckpt)
    cut_short = atomic_path(ckpt)  # entered and never left: what a SIGKILL during the save leaves
    leftover = cut_short.__enter__()
    leftover.write_bytes(b"half a checkpoint")
    another = atomic_path(tmp_path / "other.ckpt")  # another file's save, in flight
    other = another.__enter__()
    assert leftover.exists() and other.exists()
    assert_identical(ref_model, ref_result, *fit(Step(), ckpt))
    assert not leftover.exists() and other.exists()


def test_a_uci_multiswag_component_signalled_in_its_swag_phase_resumes_in_its_job(tmp_path, monkeypatch):
    """The workflow's job (workflow_scripts/multiswag_component.py: the call inside stochattn.training.resumable): a
    component signalled in its SWAG phase resumes there (its network's training returned from the completed state,
    not trained again) and writes the same draws and networks as an uninterrupted job."""
    from stochattn.experiments import methods
    from stochattn.io import save_json
    from stochattn.training import resumable, saved_training_time

    uci.prepare_sinusoid(tmp_path / "prepared.npz", n=160, seed=0)
    candidate = dict(methods.SWAG_DEFAULTS, lr=1e-3, epochs=3, max_rank=3, batch_size=16)
    save_json(tmp_path / "first.json", {"selection": {"grid": [candidate]}})  # component 0's: the candidates it scored
    model, train = dict(n_blocks=1, d_block=8, attention_n_heads=2), dict(max_epochs=3, lr=1e-2, batch_size=16)

    def job(name, swag_step, backbone_step=None, checkpoint=None):
        monkeypatch.setattr("stochattn.baselines.swag.standard_step", swag_step)
        monkeypatch.setattr("stochattn.training.standard_step", backbone_step or Step())
        with resumable(checkpoint) if checkpoint else contextlib.nullcontext():
            uci.train_multiswag_component(tmp_path / "prepared.npz", tmp_path / name / "1.pt", component=1,
                                          model=model, train=train, method_cfg={"components": 2}, seed=0,
                                          num_samples=4, first_path=tmp_path / "first.json",
                                          progress=False)  # fmt: skip
        return torch.load(tmp_path / name / "1.pt", weights_only=True)

    ref = job("ref", Step())
    ckpt = tmp_path / "resumed" / ".1.pt.resume-0123456789ab.pt"
    with pytest.raises(TrainingInterrupted) as info:
        job("resumed", Step(signal_at=11), checkpoint=ckpt)
    assert info.value.checkpoint == ckpt.with_name(".1.pt.resume-0123456789ab.1.pt")  # the SWAG phase: 2nd fit
    saved, _ = saved_training_time(ckpt)  # the network's whole training and the SWAG phase's first part
    backbone, swag = Step(), Step()
    out = job("resumed", swag, backbone, checkpoint=ckpt)
    assert backbone.calls == 0 and 0 < swag.calls < 3 * 7
    assert same(ref["draws"], out["draws"]) and same(ref["networks"], out["networks"])
    # the component's recorded training counts the attempt that was stopped (MultiSWAG's train seconds sum these)
    assert json.loads((tmp_path / "resumed" / "1.json").read_text())["seconds"] > saved > 0


def test_mc_dropouts_choosing_job_signalled_in_a_widening_training_resumes_in_its_job(tmp_path, monkeypatch):
    """The choosing job of MC Dropout's grid (workflow_scripts/run_method.py: choose_candidate inside
    stochattn.training.resumable) trains the rate a widening adds: signalled in that training, its rerun resumes it
    and writes the samples of an uninterrupted job."""
    from stochattn.io import load_npz
    from stochattn.training import resumable

    prepared = tmp_path / "prepared.npz"
    uci.prepare_sinusoid(prepared, n=160, seed=0)
    model, train = dict(n_blocks=1, d_block=8, attention_n_heads=2), dict(max_epochs=3, lr=1e-2, batch_size=16)
    uci.train_backbone(prepared, tmp_path / "backbone/model.pt", tmp_path / "backbone/meta.json", model=model,
                       train=train, seed=0, progress=False)  # fmt: skip
    # both rates are edges of their line: the choosing job always trains one more (0.1 / 0.05 or 0.9 / 0.9)
    cfg = {"grid": [{}, {"attention_dropout": 0.5, "ffn_dropout": 0.5}],
           "widen": {"keys": ["attention_dropout", "ffn_dropout"], "factor": 2.0, "low": 0.05, "high": 0.9,
                     "max_steps": 1}}  # fmt: skip
    kw = dict(model=model, train=train, method_cfg=cfg, num_samples=4, seed=0, progress=False,
              backbone_path=tmp_path / "backbone/model.pt")  # fmt: skip
    paths = [tmp_path / "candidates" / f"{k}.pt" for k in range(2)]
    for k, path in enumerate(paths):
        uci.fit_candidate("mc_dropout", prepared, path, index=k, **kw)

    def job(name, step, checkpoint=None):
        monkeypatch.setattr("stochattn.training.standard_step", step)
        with resumable(checkpoint) if checkpoint else contextlib.nullcontext():
            meta = uci.choose_candidate("mc_dropout", prepared, tmp_path / name, paths, **kw)
        return meta, load_npz(tmp_path / name / "samples.npz")

    ref_step = Step()
    ref_meta, ref = job("ref", ref_step)
    assert len(ref_meta["selection"]["widened"]) == 1 and ref_step.calls > 9
    ckpt = tmp_path / "resumed" / ".samples.npz.resume-0123456789ab.pt"
    with pytest.raises(TrainingInterrupted) as info:
        job("resumed", Step(signal_at=9), checkpoint=ckpt)
    assert info.value.checkpoint == ckpt.with_name(".samples.npz.resume-0123456789ab.0.pt")  # the widening's fit
    assert not (tmp_path / "resumed" / "samples.npz").exists()
    step = Step()
    meta, out = job("resumed", step, checkpoint=ckpt)
    assert step.calls == ref_step.calls - 9  # resumed after its 9 steps, not trained again
    assert meta["selection"]["val_crps"] == ref_meta["selection"]["val_crps"]
    assert all(torch.equal(torch.as_tensor(ref[k]), torch.as_tensor(out[k])) for k in ref)


def test_a_sigusr1_between_the_fits_of_a_resumable_block_stops_the_next_fit(tmp_path):
    """The early signal before a time limit may come while the job loads data or samples: inside resumable(...) it
    is kept, and the next fit saves after its first step and stops; the rerun ends bit-identical. Outside a fit
    nothing else happens, and the handlers are put back after the block."""
    from stochattn.training import resumable

    before = signal.getsignal(signal.SIGUSR1)
    ref_model, ref_result = fit(Step())

    def job(step):
        with resumable(tmp_path / "job.pt"):
            first = fit(Step(), max_epochs=2)
            os.kill(os.getpid(), signal.SIGUSR1)  # between the fits: recorded, nothing else
            return first, fit(step)

    with pytest.raises(TrainingInterrupted) as info:
        job(Step())
    assert (info.value.checkpoint.name, info.value.epoch, info.value.step) == ("job.1.pt", 1, 1)
    assert signal.getsignal(signal.SIGUSR1) is before
    resumed = Step()
    with resumable(tmp_path / "job.pt"):
        fit(Step(), max_epochs=2)
        model, result = fit(resumed)
    assert_identical(ref_model, ref_result, model, result)


def test_saves_at_epoch_ends_take_a_bounded_share_of_the_time(tmp_path, monkeypatch):
    """Where a save is slow next to an epoch (a SWAG phase of few steps per epoch saving its posterior), the epoch
    ends save less often: at most about a tenth of the time goes to them; a kill still resumes bit-identical.
    On a clock of the test's own (training's ``time``), so that a busy machine cannot change what is measured: a
    step takes 5 ms, a save 30 ms (most of an epoch of 7 steps)."""
    import types

    from stochattn import training

    now = [0.0]
    clock = types.SimpleNamespace(perf_counter=lambda: now[0], process_time=lambda: now[0])
    monkeypatch.setattr(training, "time", clock)
    monkeypatch.setattr(training, "_SAVE_SHARE", 0.1)
    saves, save_torch = [], training.save_torch

    class Timed(Step):
        def __call__(self, *args):
            now[0] += 0.005
            return super().__call__(*args)

    def slow(path, obj):
        saves.append(obj["epoch"])
        now[0] += 0.03
        return save_torch(path, obj)

    monkeypatch.setattr(training, "save_torch", slow)
    settings = dict(max_epochs=30, patience=None)
    ref_model, ref_result = fit(Timed(), **settings)
    ckpt = tmp_path / "fit.ckpt"
    t0 = now[0]
    fit(Timed(), ckpt, **settings)
    seconds = now[0] - t0
    ends = saves[:-1]  # the last save: the completed state
    # not every epoch (a save of 30 ms after each 35-ms epoch), about a tenth of the time
    assert 1 < len(ends) < 15 and len(ends) * 0.03 <= 0.1 * seconds + 0.03, (saves, seconds)
    ckpt.unlink()
    saves.clear()
    with pytest.raises(Killed):
        fit(Timed(kill_at=20 * STEPS + 1), ckpt, **settings)
    last = saves[-1]
    assert 0 < last <= 20  # the last epoch end saved before the kill (in epoch 21's first step: 20 may be saved)
    resumed = Timed()
    assert_identical(ref_model, ref_result, *fit(resumed, ckpt, **settings))
    assert resumed.calls == (30 - last) * STEPS


# benchmarks/uci_train_select.py --checkpoints: the schedule curves of the large data sets take hours each
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signal_at", [40, 21 * 6 + 2], ids=["before-the-first-keep", "after-patience-2-kept"])
def test_a_schedule_curve_resumes_bit_identical_and_a_finished_one_is_read_back(tmp_path, monkeypatch, signal_at,
                                                                               load_script):
    """A curve of benchmarks/uci_train_select.py signalled mid-way (6 steps an epoch; patience 2 stops at epoch 20,
    5 at 28) and rerun ends as the uninterrupted curve: every epoch's validation and test RMSE and the network kept
    for each patience, bit for bit; a third call reads the finished curve back without a training step."""
    script = load_script(REPO / "benchmarks" / "uci_train_select.py")
    prepared = tmp_path / "split0" / "prepared.npz"
    uci.prepare_sinusoid(prepared, n=160, seed=0)

    def run(name, step, checkpoint=None):
        monkeypatch.setattr("stochattn.training.standard_step", step)
        c = script.curve(str(prepared), dict(n_blocks=1, d_block=8, attention_n_heads=2), 1e-2, 16, 40, 1e-5, 0,
                         [2, 5], tmp_path / name, checkpoint)  # fmt: skip
        kept = {p: torch.load(tmp_path / name / f"p{p}" / "model.pt", weights_only=True)["state_dict"] for p in (2, 5)}
        return c, kept

    ref, ref_kept = run("ref", Step())
    assert len(ref["val"]) == 28 and [script.stop_at(ref["val"], p) for p in (2, 5)] == [(17, 20), (22, 28)]
    ckpt = tmp_path / "ckpt" / "lr0.01_b16.pt"
    with pytest.raises(TrainingInterrupted):
        run("resumed", Step(signal_at=signal_at), ckpt)
    assert (tmp_path / "resumed" / "p2").is_dir() == (signal_at > 20 * 6)  # patience 2's network kept before the stop
    step = Step()
    resumed, kept = run("resumed", step, ckpt)
    assert step.calls == 28 * 6 - signal_at  # only the steps left were trained
    for c, k in ((resumed, kept), run("resumed", (again := Step()), ckpt)):  # the same command once more
        assert c["val"].tolist() == ref["val"].tolist() and c["test"].tolist() == ref["test"].tolist()
        assert all(same(ref_kept[p], k[p]) for p in (2, 5))
    assert again.calls == 0
