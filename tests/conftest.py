"""Shared test fixtures."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run several times faster single-threaded (thread overhead dominates); restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ------------------------------------------------------------------------------------------------------------------
# one finished tiny run shared by tests/test_audit.py, test_reruns.py and test_slurm.py (session-scoped: ~40 s)
# ------------------------------------------------------------------------------------------------------------------
TINY_TARGETS = ["results/tables/uci_master.csv", "results/figures/uci_pit_yacht.png"]


def tiny_config(path, **updates):
    """config/test.yaml restricted to yacht split 0 and two methods on the shared backbone."""
    from test_workflow import REPO, write_config

    base = {"datasets": ["yacht"], "splits": 1, "methods": ["mc_dropout", "swag"]}
    return write_config(path, base=REPO / "config" / "test.yaml", **{**base, **updates})


@pytest.fixture(scope="session")
def tiny_chain(tmp_path_factory):
    """A finished tiny run of TINY_TARGETS: {"work", "cfg", "root"}. Read-only: copy it (copy_run) to change files."""
    from test_workflow import HAVE_MIRROR, MIRROR, smk

    if not HAVE_MIRROR:
        pytest.skip(f"offline data mirror {MIRROR} not present")
    root = tmp_path_factory.mktemp("chain")
    cfg = tiny_config(root / "tiny.yaml")
    res = smk(root / "work", *TINY_TARGETS, configfile=cfg)
    assert res.returncode == 0, res.stdout[-6000:]
    return {"root": root, "work": root / "work", "cfg": cfg}


def copy_run(chain, dest):
    """A copy of the shared tiny run (results, logs and Snakemake's metadata, mtimes kept) at ``dest``."""
    import shutil

    shutil.copytree(chain["work"], dest, symlinks=True)
    return dest


def audit_failures(work, target):
    """The paths of the nodes that ``stochattn audit target`` fails on (empty: the chain is intact) and the number
    of nodes it checked."""
    from stochattn import audit

    root = audit.audit(target, work)
    return sorted({n.path for n in audit._failures(root)}), sum(1 for _ in audit._iter(root))


def assert_every_output_audits_clean(work, expected):
    """Every table (csv) and figure (png) under ``work/results``: ``expected`` of them, each with an intact chain of
    at least 5 nodes."""
    targets = [p.relative_to(work).as_posix() for folder, suffix in (("tables", ".csv"), ("figures", ".png"))
               for p in sorted((work / "results" / folder).glob(f"*{suffix}"))]  # fmt: skip
    assert len(targets) == expected, targets
    for target in targets:
        failed, n = audit_failures(work, target)
        assert not failed and n >= 5, (target, failed)


def perturb_samples(path, delta=1e-9):
    """Add ``delta`` to a run's ``samples`` in place: a change only the hash can see."""
    import numpy as np

    from stochattn.io import save_npz

    data = dict(np.load(path))
    data["samples"] = data["samples"] + delta
    save_npz(path, **data)


def assert_only_dependants_fail(work, changed, dependants, others):
    """After ``changed`` (a path relative to ``work``) was modified: the audit of each of ``dependants`` fails
    naming exactly that file, and each of ``others`` (outputs not built from it) still passes."""
    for target in dependants:
        assert audit_failures(work, target)[0] == [changed], target
    for target in others:
        assert audit_failures(work, target)[0] == [], target
