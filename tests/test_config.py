"""Bad configurations stop at once with an error naming the parameter."""

import pytest

from models.config import Config, ConfigError
from models.system import main


@pytest.mark.parametrize("kw, name", [
    (dict(sf_ways=3), "sf_ways"), (dict(sf_sets=6), "sf_sets"), (dict(credits=0), "credits"),
    (dict(devices=17), "devices"), (dict(devices=0), "devices"), (dict(max_outstanding=4097), "max_outstanding"),
    (dict(coalesce_block=3), "coalesce_block"), (dict(caches=0), "caches"), (dict(link_latency=0), "link_latency"),
    (dict(devload_thresholds=(0.5, 0.25, 0.75)), "devload_thresholds"),
    (dict(host_dir="lru"), "host_dir"), (dict(host_dir_sets=3), "host_dir_sets"),
    (dict(host_dir_ways=-2), "host_dir_ways"), (dict(host_traffic=1.5), "host_traffic"),
    (dict(host_snoop_scope="some"), "host_snoop_scope"), (dict(work_entries=-1), "work_entries"),
])
def test_bad_parameter_is_named(kw, name):
    with pytest.raises(ConfigError, match=rf"^{name}="):
        Config(**kw)


def test_cli_rejects_bad_configuration(capsys, tmp_path):
    assert main(["--devices", "17", "--transactions", "10", "--out", str(tmp_path / "s.json")]) == 2
    assert "devices=17" in capsys.readouterr().err


def test_overrides_are_typed_and_bad_ones_named():
    c = Config().with_overrides("host_dir=exact, host_traffic=0.25,host_dir_ways=2,clean_evict_pull=1")
    assert (c.host_dir, c.host_traffic, c.host_dir_ways, c.clean_evict_pull) == ("exact", 0.25, 2, 1.0)
    with pytest.raises(ConfigError, match=r"'host_dirs=exact'.*name one of the Config fields"):
        Config().with_overrides("host_dirs=exact")
    with pytest.raises(ConfigError, match=r"^host_dir_sets='x': not a int"):
        Config().with_overrides("host_dir_sets=x")
    with pytest.raises(ConfigError, match=r"^host_dir_sets=6:"):
        Config().with_overrides("host_dir_sets=6")


def test_cli_rejects_a_bad_host_override(capsys, tmp_path):
    assert main(["--config", "host_dir=sometimes", "--transactions", "10", "--out", str(tmp_path / "s.json")]) == 2
    assert "host_dir='sometimes'" in capsys.readouterr().err
