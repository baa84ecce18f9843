//! Test harness of the endpoint tests: a PyIceberg-written warehouse (made once per
//! test binary) and the real `lakegate` binary on ephemeral ports, killed on drop.

#![allow(unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

pub struct Lake {
    pub flags: Vec<String>,
    pub expected: Value,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The PyIceberg-written warehouse, made once per test binary.
pub fn lake() -> &'static Lake {
    static LAKE: OnceLock<Lake> = OnceLock::new();
    LAKE.get_or_init(|| {
        let root = repo_root();
        let python = std::env::var("LAKEGATE_PYTHON")
            .unwrap_or_else(|_| root.join(".cache/venv/bin/python").display().to_string());
        let dir = std::env::temp_dir().join(format!("lakegate-pgwire-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let out = Command::new(&python)
            .arg(root.join("tests/fixtures/warehouse.py"))
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("run {python} (scripts/setup.sh installs it): {e}"));
        assert!(
            out.status.success(),
            "fixture failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let flags = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect();
        let expected = serde_json::from_str(
            &std::fs::read_to_string(dir.join("expected.json")).expect("expected.json"),
        )
        .expect("valid json");
        Lake { flags, expected }
    })
}

/// A running gateway, killed on drop.
pub struct TestGateway {
    pub child: Child,
    pub port: u16,
    pub flight_port: u16,
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start() -> TestGateway {
    let lake = lake();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lakegate"))
        .arg("serve")
        .args(&lake.flags)
        .args([
            "--pg-listen",
            "127.0.0.1:0",
            "--flight-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .env("LAKEGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn lakegate");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read banner");
    let port_of = |key: &str| -> u16 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected banner {line:?}"))
    };
    TestGateway {
        port: port_of("pg="),
        flight_port: port_of("flight="),
        child,
    }
}
