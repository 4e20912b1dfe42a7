//! The Python module (`python/`) passes its pytest suite against this build's daemon and
//! stand-in tenants. Without python3 and pytest the test says so and checks nothing,
//! unless GMUX_REQUIRE_PYTEST is set (as `.ci/run` does).

mod common;

use common::*;
use std::process::Command;

#[test]
fn the_python_module_passes_its_tests() {
    let has_pytest = Command::new("python3").args(["-c", "import pytest"]).output().is_ok_and(|o| o.status.success());
    if !has_pytest {
        assert!(std::env::var_os("GMUX_REQUIRE_PYTEST").is_none(), "python3 with pytest not found: install them (Debian's python3-pytest)");
        eprintln!("python3 with pytest not found: the Python module is not tested here");
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join("python");
    let r = run(Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&python)
        .env("PYTHONPATH", &python)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("GMUX_BIN", gmux_bin())
        .env("GMUX_TEST_SHIM", shim_lib())
        .env("GMUX_TEST_STANDIN", standin_lib())
        .env("GMUX_TEST_APP", app_bin()));
    assert!(r.status.success() && r.stdout.contains(" passed") && !r.stdout.contains("skipped"), "{}\n{}", r.stdout, r.stderr);
}
