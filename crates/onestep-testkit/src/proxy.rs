//! A TCP proxy whose connections can all be cut at once: the fault tests put it between a
//! client and its server (a broker, an HTTP API) to drop every connection mid-run.
//!
//! ```no_run
//! # async fn demo() {
//! let proxy = onestep_testkit::proxy::Proxy::start("127.0.0.1:5672".into()).await;
//! let url = format!("amqp://guest:guest@127.0.0.1:{}/%2f", proxy.port());
//! // ... run the client over `url`, then:
//! proxy.cut();
//! assert!(proxy.accepted() >= 1);
//! # }
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A proxy on a free port of 127.0.0.1 to one target address.
pub struct Proxy {
    port: u16,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accepted: Arc<AtomicUsize>,
    listener: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port and forwards every connection to `target` (`host:port`).
    ///
    /// # Panics
    /// When no port of 127.0.0.1 can be bound (test code).
    pub async fn start(target: String) -> Self {
        #[allow(clippy::expect_used)] // test support: no port is a broken machine
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port on 127.0.0.1");
        #[allow(clippy::expect_used)]
        let port = listener.local_addr().expect("a bound address").port();
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (kept, counted) = (links.clone(), accepted.clone());
        let listener = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let target = target.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                kept.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(link);
            }
        });
        Self {
            port,
            links,
            accepted,
            listener,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// How many connections it accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Drops every open connection (both sockets close); new ones are accepted as before.
    pub fn cut(&self) {
        for link in self
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            link.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.listener.abort();
        self.cut();
    }
}
