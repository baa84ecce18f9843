"""The command line: a bad setting fails at start with a message that names it."""
import subprocess

import pytest

from conftest import lakegate_bin


@pytest.mark.parametrize(
    "args, setting",
    [
        ([], "catalog.uri"),
        (["--catalog-uri", "mysql://x/y"], "catalog.uri"),
        (["--catalog-uri", "sqlite:///no/such/dir/catalog.db", "--warehouse", "file:///tmp/w"], "catalog.uri"),
        (["--pg-listen", "nonsense"], "pg.listen"),
        (["--flight-listen", "nowhere:"], "flight.listen"),
    ],
)
def test_bad_settings_fail_at_start_naming_the_setting(lake_dir, args, setting):
    base = ["--catalog-uri", f"sqlite://{lake_dir}/catalog.db", "--warehouse", f"file://{lake_dir}/warehouse"]
    cmd = [lakegate_bin(), "serve", *(base if args and args[0] != "--catalog-uri" else []), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert setting in out.stderr, out.stderr


def test_unknown_config_key_is_rejected(tmp_path):
    cfg = tmp_path / "lakegate.toml"
    cfg.write_text('[catalog]\nurl = "sqlite:///x.db"\n')
    out = subprocess.run([lakegate_bin(), "serve", "--config", str(cfg)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "url" in out.stderr and str(cfg) in out.stderr, out.stderr
