"""stochattn.protocol: captions name what differs from the paper (config/paper_protocol.yaml) and the project's
own choices, for any config keys."""

from pathlib import Path

import pytest
import yaml
from test_workflow import write_config  # the workflow tests' config merge (tests/ is on sys.path)

from stochattn.protocol import _MISSING, _get, fmt, load_paper_protocol, protocol_deviations, protocol_note

REPO = Path(__file__).resolve().parents[1]
PAPER = load_paper_protocol(REPO / "config" / "paper_protocol.yaml")


def merged(tmp_path: Path, *overlays: Path, **updates) -> dict:
    """config/config.yaml with YAML ``overlays`` and then ``updates`` merged over it (as --configfile does)."""
    path = tmp_path / "merged.yaml"
    write_config(path, base=REPO / "config" / "config.yaml")
    for overlay in overlays:
        write_config(path, base=path, **yaml.safe_load(overlay.read_text()))
    write_config(path, base=path, **updates)
    return yaml.safe_load(path.read_text())


def test_paper_record_names_real_config_keys():
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for key, entry in PAPER.items():
        assert _get(cfg, key) is not _MISSING, f"paper_protocol.yaml names {key!r}, which config.yaml lacks"
        assert entry["source"].strip()
    assert PAPER["splits"]["value"] == 20 and PAPER["num_samples"]["value"] == 19
    assert PAPER["method_params.multiswag.components"]["value"] == 10
    assert len(PAPER["datasets"]["value"]) == 8 and len(PAPER["methods"]["value"]) == 6


def test_full_config_runs_every_stated_value(tmp_path):
    cfg = merged(tmp_path)
    dev = protocol_deviations(cfg, PAPER)
    assert dev["reduced"] == dev["changed"] == dev["unverified_data"] == []
    note = protocol_note(cfg, PAPER)
    assert "Paper protocol: every value the paper states is run." in note
    # what config.yaml chooses on its own is named as such, with its value
    choices = note.split("Project choices (not stated in the paper): ")[1]
    assert "model: n_blocks=3, d_block=192" in choices and "train: lr=0.0001" in choices
    assert "data: val_fraction=0.1, cal_fraction=0.1" in choices
    assert "seed=" not in note and "mirrors" not in note and "device" not in note


def test_quick_config_names_its_reductions(tmp_path):
    cfg = merged(tmp_path, REPO / "config" / "quick.yaml")
    dev = protocol_deviations(cfg, PAPER)
    assert dev["reduced"] == [
        "splits=2 (paper: 20, 5 for protein)",
        "data.max_train={kin8nm: 2000, naval: 2000, power: 2000, protein: 2000} (paper: all training rows)",
        "method_params.multiswag.components=2 (paper: 10)",
        *(f"{d}: splits=1 (paper: 20, 5 for protein)" for d in ("naval", "kin8nm", "power", "protein")),
    ]
    assert dev["changed"] == []
    note = protocol_note(cfg, PAPER, cfg["report"]["note"])
    assert note.startswith("Offline quick configuration")
    assert "Paper protocol" not in note
    assert "model: n_blocks=1, d_block=64" in note and "train: lr=0.001" in note
    assert "dataset_overrides.naval.train: lr=0.003" in note  # per-data-set choices are project choices too
    # every value of a method that runs is named with its value, whatever keys the method has
    # the global entry (the per-data-set ones, e.g. dataset_overrides.yacht.method_params.multiswag, come first)
    group = note.split("; method_params.multiswag: ")[1].split(";")[0]
    for key, value in cfg["method_params"]["multiswag"].items():
        if isinstance(value, dict):  # a nested setting (widen) is its own group, each of its values named
            nested = note.split(f"; method_params.multiswag.{key}: ")[1].split(";")[0]
            assert all(f"{k}={fmt(v)}" in nested for k, v in value.items())
        elif key != "components":  # stated by the paper: under "Reduced"
            assert f"{key}={fmt(value)}" in group


def test_changed_added_unverified_and_unknown_keys(tmp_path):
    """A config that differs everywhere: fewer data sets plus a custom unverified one, more samples, another
    operating point, an extra method with its own (new) parameters, and a method not run."""
    cfg = merged(
        tmp_path,
        REPO / "config" / "test.yaml",
        datasets=["yacht", "bostonHousing"],
        custom_datasets={"bostonHousing": {"folder": "bostonHousing", "n_splits": 20, "verify": False}},
        methods=["sa", "sa_match", "swag"],
        num_samples=50,
        method_params={"sa": {"operating_point": "surrogate"}, "sa_match": {"grid": [4, 8]}},
    )
    dev = protocol_deviations(cfg, PAPER)
    assert "datasets=[yacht] (paper: the eight UCI data sets)" in dev["reduced"]
    assert "methods=[sa, swag] (paper: all six methods)" in dev["reduced"]
    assert dev["added"] == ["datasets +bostonHousing", "methods +sa_match"]
    assert "num_samples=50 (paper: 19)" in dev["changed"]  # more is not "reduced"
    assert "method_params.sa.operating_point=surrogate (paper: loss_argmin)" in dev["changed"]
    assert dev["unverified_data"] == ["bostonHousing"]
    assert "method_params.sa_match.grid=[4, 8]" in dev["project_choices"]  # a key no list names
    assert not any(c.startswith(("method_params.ivon", "method_params.hsa")) for c in dev["project_choices"])
    assert not any("multiswag" in d for d in dev["reduced"] + dev["changed"])  # not run: its L does not matter
    assert not any("custom_datasets" in c or "folder" in c for c in dev["project_choices"])
    note = protocol_note(cfg, PAPER)
    assert "Paper protocol" not in note
    assert "Changed from the paper: " in note and "Beyond the paper: datasets +bostonHousing" in note
    assert "NOT checksum-verified (verify: false): bostonHousing." in note


def test_bad_paper_record(tmp_path):
    bad = tmp_path / "paper.yaml"
    bad.write_text("splits: {value: 20}\n")
    with pytest.raises(ValueError, match="'splits' needs 'value' and a non-empty 'source'"):
        load_paper_protocol(bad)
    bad.write_text("splits: {value: 20, source: x, note: y}\n")
    with pytest.raises(ValueError, match="unknown fields"):
        load_paper_protocol(bad)


def test_dataset_section_merges_one_data_sets_overrides_only():
    from stochattn.protocol import dataset_section

    cfg = {"train": {"lr": 1e-3, "batch_size": 64}, "method_params": {"ivon": {"grid": [{"lr": 1}], "mc": 1}},
           "dataset_overrides": {"naval": {"train": {"lr": 3e-3}, "method_params": {"ivon": {"mc": 2}}}}}  # fmt: skip
    assert dataset_section(cfg, "train", "naval") == {"lr": 3e-3, "batch_size": 64}
    assert dataset_section(cfg, "train", "yacht") == cfg["train"]
    assert dataset_section(cfg, "method_params", "naval", "ivon") == {"grid": [{"lr": 1}], "mc": 2}
    assert dataset_section(cfg, "method_params", "naval", "hsa") == {}
    assert dataset_section({"train": {"lr": 1}}, "train", "naval") == {"lr": 1}  # configs recorded before overrides
    assert cfg["train"]["lr"] == 1e-3  # copies, never the config itself


def test_dataset_overrides_of_paper_keys_are_deviations_named_with_their_data_set():
    cfg = {"datasets": ["naval", "yacht"], "methods": ["sa"], "splits": 2, "train": {"lr": 1e-4},
           "dataset_overrides": {"naval": {"splits": 1, "train": {"lr": 3e-3, "patience": 40}},
                                 "protein": {"splits": 1}}}  # fmt: skip
    paper = {"splits": {"value": 20, "source": "s"}, "train.lr": {"value": 1e-4, "source": "s"}}
    dev = protocol_deviations(cfg, paper)
    assert dev["reduced"] == ["splits=2 (paper: 20)", "naval: splits=1 (paper: 20)"]
    assert dev["changed"] == ["naval: train.lr=0.003 (paper: 0.0001)"]
    # a key the paper does not state stays a project choice; protein is not run, so its override says nothing
    assert "dataset_overrides.naval.train.patience=40" in dev["project_choices"]
    assert not any("protein" in item for items in dev.values() for item in items)


def test_a_uci_caption_states_the_uci_slice_alone():
    """The ETT and ERA5 slices' settings are stated in their own captions, not in every UCI table's."""
    cfg = {"datasets": ["yacht"], "methods": ["sa"], "num_samples": 19, "model": {"n_blocks": 1},
           "ett": {"max_series": {"train": 700}, "train": {"lr": 1e-3}}, "era5": {"lead_hours": 72}}
    note = protocol_note(cfg, {})
    assert "model: n_blocks=1" in note and "ett" not in note and "era5" not in note


def test_multiswag_must_repeat_swags_settings():
    """The workflow keeps the SWAG run as MultiSWAG's member 0, so the two sections may differ only in components."""
    from stochattn.protocol import check_multiswag_matches_swag

    swag = {"lr": 1e-3, "epochs": 2, "grid": [{"lr": 1e-3}, {"lr": 1e-2}]}
    check_multiswag_matches_swag(swag, {**swag, "components": 3})
    with pytest.raises(ValueError, match=r"\['anneal_epochs', 'grid'\]"):
        check_multiswag_matches_swag(swag, {**swag, "components": 3, "grid": [{"lr": 1e-3}], "anneal_epochs": 0})
