//! A TLS-terminating proxy in front of a plain PostgreSQL server, since the shared server's own
//! certificate is not ours to choose: it answers a client's `SSLRequest` with `S`, completes
//! the TLS handshake as the server with the test CA's certificate, then pipes the decrypted
//! stream to the server. A client that does not ask for TLS first is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use idempotency_test::pki::Pki;

/// The `SSLRequest` message: its length (8) and code (1234 << 16 | 5679).
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// What the proxy has seen, counted as it happens.
#[derive(Default)]
struct Counts {
    /// TLS handshakes completed.
    handshakes: AtomicUsize,
    /// Clients refused because their first message was not an `SSLRequest`.
    refused_plain: AtomicUsize,
}

/// The listening proxy; stops when dropped.
pub struct PgTlsProxy {
    /// Its port on 127.0.0.1.
    pub port: u16,
    counts: Arc<Counts>,
    task: JoinHandle<()>,
}

impl PgTlsProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(pki: &Pki, upstream: String) -> Self {
        let acceptor = pki.acceptor();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Counts::default());
        let task = tokio::spawn({
            let counts = Arc::clone(&counts);
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let (acceptor, counts, upstream) =
                        (acceptor.clone(), Arc::clone(&counts), upstream.clone());
                    tokio::spawn(serve(client, acceptor, counts, upstream));
                }
            }
        });
        Self { port, counts, task }
    }

    /// TLS handshakes completed so far.
    pub fn handshakes(&self) -> usize {
        self.counts.handshakes.load(Ordering::SeqCst)
    }

    /// Clients refused so far for not asking for TLS.
    pub fn refused_plain(&self) -> usize {
        self.counts.refused_plain.load(Ordering::SeqCst)
    }
}

impl Drop for PgTlsProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client: `SSLRequest`, `S`, handshake, then bytes both ways until either side closes.
async fn serve(
    mut client: TcpStream,
    acceptor: TlsAcceptor,
    counts: Arc<Counts>,
    upstream: String,
) {
    let mut first = [0u8; 8];
    if client.read_exact(&mut first).await.is_err() {
        return;
    }
    if first != SSL_REQUEST {
        // A startup message in the clear: closing is the refusal (as `hostssl`-only would).
        counts.refused_plain.fetch_add(1, Ordering::SeqCst);
        return;
    }
    if client.write_all(b"S").await.is_err() {
        return;
    }
    let Ok(mut tls) = acceptor.accept(client).await else {
        return;
    };
    counts.handshakes.fetch_add(1, Ordering::SeqCst);
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
}
