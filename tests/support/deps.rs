//! Where the extra test venvs and node projects live: `make test` builds one venv per
//! `tests/python/venvs/NAME.txt` (at `$STEPLINE_VENV_PREFIX-NAME`) and one `node_modules` per
//! `tests/node/NAME/` (at `$STEPLINE_NODE_CACHE/NAME`). A missing one fails the test with the
//! command that builds it; tests never skip for it.

use std::path::PathBuf;

fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/stepline")
}

/// The Python interpreter of the venv built from `tests/python/venvs/{name}.txt`.
pub fn venv_python(name: &str) -> PathBuf {
    let prefix = match std::env::var_os("STEPLINE_VENV_PREFIX") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => cache_dir().join("venv"),
    };
    let mut dir = prefix.into_os_string();
    dir.push(format!("-{name}"));
    let path = PathBuf::from(dir).join("bin/python");
    assert!(
        path.exists(),
        "Python interpreter {} does not exist: run `make venvs` (or `make test`, which builds every \
         venv of tests/python/venvs/ and exports STEPLINE_VENV_PREFIX).",
        path.display()
    );
    path
}

/// The `node_modules` directory installed from `tests/node/{name}/package.json`.
pub fn node_modules(name: &str) -> PathBuf {
    let base = match std::env::var_os("STEPLINE_NODE_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => cache_dir().join("node"),
    };
    let path = base.join(name).join("node_modules");
    assert!(
        path.is_dir(),
        "{} does not exist: run `make node-deps` (or `make test`, which installs every project of \
         tests/node/ and exports STEPLINE_NODE_CACHE).",
        path.display()
    );
    path
}
