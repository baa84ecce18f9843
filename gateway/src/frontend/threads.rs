//! Connection threads: the Postgres endpoint serves each connection on one of a few threads,
//! each its own single-threaded runtime with its own socket reactor (one thread per core).
//!
//! On the shared work-stealing runtime, every statement of a busy connection woke a second
//! worker to look for work it rarely found: a cached answer cost 29 µs of CPU on two workers
//! and 22 µs on one (`bench/serving/alone.py`, release; docs/findings.md). A connection's
//! protocol, planning and cache lookups are short and stay on its thread; whatever a
//! statement *spawns* (an engine's partitions, DataFusion's parallel scans, background work a
//! statement starts) goes to the shared runtime ([`OnShared`]), so one large query still uses
//! every core and a thread's other connections keep being served between its polls.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Stack of each connection thread (as the shared runtime's: deep statements recurse).
const THREAD_STACK: usize = 8 << 20;

/// One connection thread: its runtime and how many connections it serves.
struct Thread {
    runtime: Handle,
    connections: Arc<AtomicUsize>,
}

/// The connection threads of one endpoint. They end once the endpoint's shutdown fired and
/// their last connection closed (connections open at shutdown are served to their end, as
/// the running queries' grace expects).
pub(crate) struct ConnectionThreads {
    threads: Vec<Thread>,
    /// The shared runtime, where statements spawn.
    shared: Handle,
}

impl ConnectionThreads {
    /// Starts one thread per core (`count` of 0), or `count`, named `{name}-N`.
    ///
    /// # Errors
    /// When a thread or its runtime cannot be made.
    pub(crate) fn start(
        name: &str,
        count: usize,
        shutdown: &CancellationToken,
    ) -> std::io::Result<Self> {
        let count = match count {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let connections = Arc::new(AtomicUsize::new(0));
            threads.push(Thread {
                runtime: runtime.handle().clone(),
                connections: connections.clone(),
            });
            let shutdown = shutdown.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .stack_size(THREAD_STACK)
                .spawn(move || {
                    runtime.block_on(async {
                        shutdown.cancelled().await;
                        while connections.load(Ordering::Acquire) > 0 {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    });
                })?;
        }
        Ok(Self {
            threads,
            shared: Handle::current(),
        })
    }

    /// Serves `socket` with `serve` on the thread with the fewest connections. `serve` is
    /// called on that thread (what it spawns there, before its future runs, stays there: a
    /// watchdog of the socket); what its future spawns runs on the shared runtime.
    pub(crate) fn serve<S, F>(&self, socket: TcpStream, serve: S)
    where
        S: FnOnce(TcpStream) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let Some(thread) = self
            .threads
            .iter()
            .min_by_key(|t| t.connections.load(Ordering::Relaxed))
        else {
            return;
        };
        // Moved to the thread's reactor: deregistered here, registered there.
        let socket = match socket.into_std() {
            Ok(socket) => socket,
            Err(e) => {
                warn!(error = %e, "cannot hand a connection to its thread; closed");
                return;
            }
        };
        let served = Served(thread.connections.clone());
        served.0.fetch_add(1, Ordering::AcqRel);
        let shared = self.shared.clone();
        thread.runtime.spawn(async move {
            let _served = served;
            match TcpStream::from_std(socket) {
                Ok(socket) => {
                    OnShared {
                        inner: Some(Box::pin(serve(socket))),
                        shared,
                    }
                    .await;
                }
                Err(e) => warn!(error = %e, "cannot register a connection on its thread; closed"),
            }
        });
    }
}

/// Counts a connection served until it ends (even by a panic).
struct Served(Arc<AtomicUsize>);

impl Drop for Served {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A future polled — and dropped — with the shared runtime entered: what it spawns (and the
/// timers and sockets it makes) belong to the shared runtime; its own wake-ups stay on its
/// thread. Dropped there too: a connection's future dropped unfinished (a panic, its task
/// aborted) runs drops that spawn their cleanup (an engine's cancel, a lease's release), which
/// must not be left on a connection thread that may end.
struct OnShared<F> {
    inner: Option<Pin<Box<F>>>,
    shared: Handle,
}

impl<F: Future> Future for OnShared<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let _entered = this.shared.enter();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Pending;
        };
        let polled = inner.as_mut().poll(cx);
        if polled.is_ready() {
            this.inner = None;
        }
        polled
    }
}

impl<F> Drop for OnShared<F> {
    fn drop(&mut self) {
        let _entered = self.shared.enter();
        self.inner = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// The names of this process's threads that start with `prefix`.
    fn threads_named(prefix: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|tasks| {
                tasks
                    .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                    .filter(|name| name.starts_with(prefix))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Each connection answers with the thread it is served on and the one its spawned task
    /// ran on.
    async fn serve_names(socket: TcpStream) {
        let here = std::thread::current().name().unwrap_or("").to_string();
        let spawned =
            tokio::spawn(async { std::thread::current().name().unwrap_or("").to_string() })
                .await
                .unwrap_or_default();
        let mut socket = socket;
        let _ = socket
            .write_all(format!("{here} {spawned}\n").as_bytes())
            .await;
        // Held open until the client closes.
        let _ = socket.read(&mut [0u8; 1]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_spread_over_threads_and_their_spawns_run_on_the_shared_runtime() {
        let shutdown = CancellationToken::new();
        let threads = ConnectionThreads::start("lgtest-conn", 2, &shutdown).expect("threads");
        // A thread names itself once it runs.
        for _ in 0..50 {
            if threads_named("lgtest-conn") == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(threads_named("lgtest-conn"), 2);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut clients = Vec::new();
        let mut served = Vec::new();
        for _ in 0..2 {
            let client = TcpStream::connect(addr).await.expect("connect");
            let (socket, _) = listener.accept().await.expect("accept");
            threads.serve(socket, serve_names);
            let mut client = client;
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while client.read(&mut byte).await.expect("read") == 1 && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            served.push(String::from_utf8(line).expect("utf8"));
            clients.push(client);
        }
        served.sort();
        // The second connection went to the thread without one.
        assert!(served[0].starts_with("lgtest-conn-0 "), "{served:?}");
        assert!(served[1].starts_with("lgtest-conn-1 "), "{served:?}");
        for s in &served {
            let spawned = s.split(' ').nth(1).unwrap_or("");
            assert!(
                !spawned.starts_with("lgtest-conn"),
                "spawned on its thread: {s}"
            );
            assert!(!spawned.is_empty(), "{s}");
        }
        // After shutdown a thread serves its connections to their end, then ends.
        shutdown.cancel();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(threads_named("lgtest-conn"), 2, "connections still open");
        drop(clients);
        let mut left = usize::MAX;
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            left = threads_named("lgtest-conn");
            if left == 0 {
                break;
            }
        }
        assert_eq!(left, 0, "threads outlived their connections after shutdown");
    }

    /// Spawns, when dropped, a task that reports the thread it ran on.
    struct SpawnOnDrop(Option<tokio::sync::oneshot::Sender<String>>);

    impl Drop for SpawnOnDrop {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                tokio::spawn(async move {
                    let _ = tx.send(std::thread::current().name().unwrap_or("").to_string());
                });
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_dropped_unfinished_spawns_its_cleanup_on_the_shared_runtime() {
        let shared = Handle::current();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("lgtest-drop".into())
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(async move {
                    let held = SpawnOnDrop(Some(tx));
                    let mut connection = OnShared {
                        inner: Some(Box::pin(async move {
                            let _held = held;
                            std::future::pending::<()>().await;
                        })),
                        shared,
                    };
                    // Polled once (it waits), then dropped unfinished on this thread, whose
                    // runtime ends right after: a cleanup spawned here would never run.
                    tokio::select! {
                        biased;
                        () = &mut connection => {}
                        () = std::future::ready(()) => {}
                    }
                    drop(connection);
                });
            })
            .expect("thread")
            .join()
            .expect("joined");
        let cleaned = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .expect("in time")
            .expect("the cleanup ran");
        assert!(
            !cleaned.starts_with("lgtest-drop"),
            "on the connection thread"
        );
    }
}
