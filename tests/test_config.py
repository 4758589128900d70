"""Bad configurations stop at once with an error naming the parameter."""

import pytest

from models.config import Config, ConfigError
from models.system import main


@pytest.mark.parametrize("kw, name", [
    (dict(sf_ways=3), "sf_ways"), (dict(sf_sets=6), "sf_sets"), (dict(credits=0), "credits"),
    (dict(devices=17), "devices"), (dict(devices=0), "devices"), (dict(max_outstanding=4097), "max_outstanding"),
    (dict(coalesce_block=3), "coalesce_block"), (dict(caches=0), "caches"), (dict(link_latency=0), "link_latency"),
    (dict(devload_thresholds=(0.5, 0.25, 0.75)), "devload_thresholds"),
])
def test_bad_parameter_is_named(kw, name):
    with pytest.raises(ConfigError, match=rf"^{name}="):
        Config(**kw)


def test_cli_rejects_bad_configuration(capsys, tmp_path):
    assert main(["--devices", "17", "--transactions", "10", "--out", str(tmp_path / "s.json")]) == 2
    assert "devices=17" in capsys.readouterr().err
