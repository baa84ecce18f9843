//! The private PostgreSQL cluster that holds the catalog mirror when `[pg_catalog] uri` is not
//! set: initdb'd once into a template (reused by every later start), copied to a directory of
//! this process under the system's temp dir, started on a Unix socket only (no TCP port), and
//! stopped with the gateway — also when the gateway is killed: the server runs under a
//! `sh` that stops it as soon as the gateway's end of its stdin pipe closes.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::wire::{Connection, Endpoint, Host};
use crate::error::{Error, Result};

/// The superuser of the private cluster and the mirror tables' owner: `postgres`, as in
/// nearly every PostgreSQL installation.
pub(super) const SUPERUSER: &str = "postgres";

/// The private cluster's socket "port" (it only names the socket file).
const PORT: u16 = 5432;

/// A running private cluster; dropping it stops the server and removes its directory.
pub struct Cluster {
    dir: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
    /// How to connect to it.
    pub endpoint: Endpoint,
}

fn fail(reason: impl Into<String>) -> Error {
    Error::CatalogMirror {
        reason: reason.into(),
    }
}

/// The directory holding `initdb` and `postgres`: `configured` when set, else the first on
/// `PATH`, else the newest `/usr/lib/postgresql/<major>/bin` (Debian's layout).
pub fn find_bin_dir(configured: &str) -> Option<PathBuf> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if !configured.is_empty() {
        let d = PathBuf::from(configured);
        return has_both(&d).then_some(d);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if has_both(&d) {
                return Some(d);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((major, e.path().join("bin")))
        })
        .filter(|(_, d)| has_both(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d)
}

/// The user the server runs as: ourselves, or `postgres` when we are root (PostgreSQL refuses
/// to run as root).
fn run_as() -> Result<Option<(u32, u32)>> {
    let euid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1);
    if euid != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postgres") && f.len() > 3)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
        .map(Some)
        .ok_or_else(|| {
            fail(
                "lakegate runs as root and there is no `postgres` user to run the catalog's \
                 PostgreSQL as (PostgreSQL refuses root): create one, run lakegate as another \
                 user, or set [pg_catalog] uri",
            )
        })
}

fn command(bin: &Path, user: Option<(u32, u32)>) -> Command {
    let mut c = Command::new(bin);
    if let Some((uid, gid)) = user {
        c.uid(uid).gid(gid);
    }
    c.env_remove("PGDATA")
        .env_remove("PGHOST")
        .env("LC_ALL", "C");
    c
}

fn chown_tree(dir: &Path, user: Option<(u32, u32)>) -> std::io::Result<()> {
    let Some((uid, gid)) = user else {
        return Ok(());
    };
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() && !path.is_symlink() {
            chown_tree(&path, user)?;
        } else {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// `initdb`'s template for this PostgreSQL version and user, made once (atomically, by
/// rename) and reused: a copy takes 0.1 s where initdb takes 1 s.
fn template(bin: &Path, user: Option<(u32, u32)>) -> Result<PathBuf> {
    let version = std::fs::canonicalize(bin)
        .unwrap_or_else(|_| bin.to_path_buf())
        .to_string_lossy()
        .replace('/', "_");
    let uid = user.map_or_else(
        || {
            std::fs::metadata("/proc/self")
                .map(|m| m.uid())
                .unwrap_or(0)
        },
        |(u, _)| u,
    );
    let dir = std::env::temp_dir().join(format!(
        "lakegate-pgcat-template-{uid}-{SUPERUSER}-utf8{version}"
    ));
    let owned = |d: &Path| {
        std::fs::metadata(d).is_ok_and(|m| m.uid() == uid && m.mode() & 0o022 == 0)
            && d.join("PG_VERSION").is_file()
    };
    if owned(&dir) {
        return Ok(dir);
    }
    let fresh = std::env::temp_dir().join(format!("lakegate-pgcat-template-{uid}-{}.tmp", ours()));
    std::fs::create_dir_all(&fresh).map_err(|e| fail(format!("{}: {e}", fresh.display())))?;
    chown_tree(&fresh, user).map_err(|e| fail(format!("chown {}: {e}", fresh.display())))?;
    let data = fresh.join("data");
    // C.UTF-8: code-point order (as `C`) with Unicode case mapping (`upper('ß')`,
    // `lower('É')`), what a UTF-8 installation answers; plain `C` where the system lacks it.
    let initdb = |locale: &str| {
        let _ = std::fs::remove_dir_all(&data);
        command(&bin.join("initdb"), user)
            .arg("-D")
            .arg(&data)
            .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8"])
            .arg(format!("--locale={locale}"))
            .args(["--no-sync", "--no-instructions"])
            .output()
            .map_err(|e| fail(format!("initdb: {e}")))
    };
    let mut out = initdb("C.UTF-8")?;
    if !out.status.success() {
        out = initdb("C")?;
    }
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&fresh);
        return Err(fail(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    if std::fs::rename(&data, &dir).is_err() && !owned(&dir) {
        let _ = std::fs::remove_dir_all(&fresh);
        return Err(fail(format!(
            "cannot keep the template at {}",
            dir.display()
        )));
    }
    let _ = std::fs::remove_dir_all(&fresh);
    Ok(dir)
}

/// A name part no other process or call has: our PID (read back by [`remove_stale`]) and
/// the time in nanoseconds.
fn ours() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos:x}", std::process::id())
}

/// Removes the directories of private clusters whose gateway is gone (killed with no chance
/// to clean up; their servers stopped when its pipe closed).
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| n.strip_prefix("lakegate-pgcat-run-"))
        else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            debug!(dir = %entry.path().display(), "removing a stale catalog cluster");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Cluster {
    /// Starts a private cluster from the binaries in `bin` and waits until it accepts
    /// connections.
    ///
    /// # Errors
    /// [`Error::CatalogMirror`] naming what failed (initdb, the server's log).
    pub async fn start(bin: &Path) -> Result<Self> {
        let started = Instant::now();
        remove_stale();
        let user = run_as()?;
        let template = template(bin, user)?;
        let dir = std::env::temp_dir().join(format!("lakegate-pgcat-run-{}", ours()));
        let data = dir.join("data");
        copy_tree(&template, &data).map_err(|e| fail(format!("copy template: {e}")))?;
        let _ = std::fs::remove_file(data.join("postmaster.pid"));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| fail(format!("{}: {e}", data.display())))?;
        chown_tree(&dir, user).map_err(|e| fail(format!("chown {}: {e}", dir.display())))?;
        let log = dir.join("server.log");
        let postgres = bin.join("postgres");
        // The server stops when our end of the pipe closes: on drop, and when we are killed.
        let script = format!(
            "\"$0\" -D \"$1\" -k \"$2\" -c listen_addresses= -c port={PORT} -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=16MB \
             -c max_connections=64 -c jit=off </dev/null >>\"$3\" 2>&1 & pid=$!; \
             read _ignored; kill -INT $pid; wait $pid"
        );
        let mut child = command(Path::new("/bin/sh"), user)
            .arg("-c")
            .arg(script)
            .arg(&postgres)
            .arg(&data)
            .arg(&dir)
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| fail(format!("start {}: {e}", postgres.display())))?;
        let stdin = child.stdin.take();
        let endpoint = Endpoint {
            host: Host::Unix(dir.clone()),
            port: PORT,
            user: SUPERUSER.into(),
            password: None,
            database: "postgres".into(),
        };
        let mut cluster = Self {
            dir,
            child,
            stdin,
            endpoint,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match Connection::connect(&cluster.endpoint).await {
                Ok(_) => break,
                Err(e) => {
                    let exited = cluster.child.try_wait().ok().flatten().is_some();
                    if exited || Instant::now() > deadline {
                        let log = std::fs::read_to_string(&log).unwrap_or_default();
                        let tail: String =
                            log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                        return Err(fail(format!("the server did not start ({e}): {tail}")));
                    }
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }
        }
        info!(
            dir = %cluster.dir.display(),
            ms = started.elapsed().as_millis() as u64,
            "catalog mirror: private PostgreSQL started"
        );
        Ok(cluster)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        if self.child.try_wait().ok().flatten().is_none() {
            warn!("catalog mirror: the private PostgreSQL did not stop in 10 s");
            let _ = self.child.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
