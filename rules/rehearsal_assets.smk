# Rules of the rehearsal assets (helpers in rules/rehearsal.smk); defined only when rehearsal.enabled.


if REHEARSAL_ON:

    rule rehearsal_timesfm:
        """A random-weight TimesFM 2.5 200M (the public tensor names and shapes) in the Hugging Face cache folder
        of ett.backbone.checkpoint, where ett_fetch_checkpoint finds it offline (HF_HUB_OFFLINE=1)."""
        output:
            marker=f"{ETT['backbone']['checkpoint']['cache']}/rehearsal.json",
            prov=f"{ETT['backbone']['checkpoint']['cache']}/rehearsal.json.prov.json",
        log:
            "logs/rehearsal/timesfm.log",
        benchmark:
            benchmark_file("rehearsal_timesfm", "timesfm")
        localrule: True
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=30,
        params:
            seed=REHEARSAL.get("seed", 0),
            code=code_for("stochattn.rehearsal:write_timesfm_checkpoint"),
        script:
            "../workflow_scripts/rehearsal.py"

    rule rehearsal_weatherbench:
        """Synthetic WeatherBench 5.625 deg files of every folder ClimaX's 48 variables need, and the constants, for
        era5.weatherbench.years (short years), in the mirror layout era5_fetch reads."""
        output:
            manifest=f"{REHEARSAL_MIRROR}/weatherbench/rehearsal.json",
            prov=f"{REHEARSAL_MIRROR}/weatherbench/rehearsal.json.prov.json",
        log:
            "logs/rehearsal/weatherbench.log",
        benchmark:
            benchmark_file("rehearsal_weatherbench", "weatherbench")
        localrule: True
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=30,
        params:
            years=sorted({int(y) for ys in ERA5["weatherbench"]["years"].values() for y in ys}),
            folders=ERA5["weatherbench"]["folders"],
            steps_per_year=REHEARSAL.get("steps_per_year"),
            seed=REHEARSAL.get("seed", 0),
            code=code_for("stochattn.rehearsal:write_weatherbench_mirror"),
        script:
            "../workflow_scripts/rehearsal.py"

    rule rehearsal_climax:
        """A random-weight ClimaX in the official Lightning checkpoint layout (5.625 deg architecture), the file
        behind era5.backbone.checkpoint.url (a file: URL)."""
        output:
            checkpoint=REHEARSAL_CLIMAX,
            prov=f"{REHEARSAL_CLIMAX}.prov.json",
        log:
            "logs/rehearsal/climax.log",
        benchmark:
            benchmark_file("rehearsal_climax", "climax")
        localrule: True
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=4000,
            runtime=30,
        params:
            seed=REHEARSAL.get("seed", 0),
            code=code_for("stochattn.rehearsal:write_climax_checkpoint"),
        script:
            "../workflow_scripts/rehearsal.py"
