# The full-size rehearsal of the cluster path (config/rehearsal.yaml, `make rehearsal`): the rules below write, in
# the exact public formats, what the cluster configuration downloads (stochattn.rehearsal): a random-weight TimesFM
# 2.5 200M in the Hugging Face cache the ETT checkpoint rule reads, WeatherBench netCDF files of ClimaX's 48 variables
# in the mirror the ERA5 fetch reads, and a random-weight ClimaX 5.625deg.ckpt behind the file URL its fetch
# downloads. Everything downstream is the cluster's own code path at the real model sizes. Nothing is a result.

REHEARSAL = config.get("rehearsal") or {}
REHEARSAL_ON = bool(REHEARSAL.get("enabled"))
REHEARSAL_MIRROR = "results/rehearsal/mirror"
REHEARSAL_CLIMAX = "results/rehearsal/5.625deg.ckpt"


def rehearsal_input(asset):
    """The rehearsal asset a fetch rule reads (none outside a rehearsal)."""
    if not REHEARSAL_ON:
        return []
    return {"timesfm": f"{ETT['backbone']['checkpoint']['cache']}/rehearsal.json",
            "weatherbench": f"{REHEARSAL_MIRROR}/weatherbench/rehearsal.json",
            "climax": REHEARSAL_CLIMAX}[asset]  # fmt: skip
