//! What crosses the wire between a benchmark and a store: a TCP proxy on loopback that counts
//! what a store's client sends (bytes, writes, and on PostgreSQL each frontend protocol message
//! by its type), the store URLs pointed at it, and an HTTP/2 (h2c) client connection. Shared by
//! `waiters` and `steps`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a [`CountingProxy`] reads of the client's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Bytes and writes only.
    Raw,
    /// The PostgreSQL frontend protocol (v3) as well: each message counted by its type byte
    /// (`Q` simple query, `P` parse, `B` bind, `E` execute, `S` sync, ...). The client must not
    /// encrypt (`sslmode=disable`, see [`through`]).
    Postgres,
}

/// What a store's client sent, counted by [`CountingProxy`].
pub struct Traffic {
    bytes: AtomicU64,
    writes: AtomicU64,
    /// PostgreSQL frontend messages by type byte; index 0 counts the untyped startup messages
    /// (startup, SSL and cancel requests), index 1 the [`PINGS`] among the syncs.
    messages: [AtomicU64; 256],
}

impl Default for Traffic {
    fn default() -> Self {
        Self {
            bytes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            messages: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Traffic {
    /// Bytes and writes (reads from the client's socket) so far.
    pub fn now(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
        )
    }

    /// PostgreSQL frontend messages of type `kind` so far ([`Protocol::Postgres`] only).
    pub fn messages(&self, kind: u8) -> u64 {
        self.messages[usize::from(kind)].load(Ordering::Relaxed)
    }

    /// Every count at once, to subtract one moment from another.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            bytes: self.bytes.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            messages: std::array::from_fn(|kind| self.messages[kind].load(Ordering::Relaxed)),
        }
    }
}

/// The counts of a [`Traffic`] at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Bytes the client sent.
    pub bytes: u64,
    /// Reads of the client's socket that returned bytes.
    pub writes: u64,
    /// PostgreSQL frontend messages by type byte (0: untyped startup messages; 1: [`PINGS`]).
    pub messages: [u64; 256],
}

impl Snapshot {
    /// What was sent between `earlier` and this snapshot.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot {
            bytes: self.bytes - earlier.bytes,
            writes: self.writes - earlier.writes,
            messages: std::array::from_fn(|kind| self.messages[kind] - earlier.messages[kind]),
        }
    }

    /// PostgreSQL messages of type `kind`.
    pub fn messages(&self, kind: u8) -> u64 {
        self.messages[usize::from(kind)]
    }

    /// PostgreSQL round trips: each `Sync` (`S`: the end of an extended-protocol exchange, or
    /// sqlx's ping) and each simple `Query` (`Q`) waits for the server's `ReadyForQuery`. Exact
    /// for a client that does not pipeline (sqlx does not).
    pub fn pg_round_trips(&self) -> u64 {
        self.messages(b'S') + self.messages(b'Q')
    }

    /// PostgreSQL pings among the round trips: a `Sync` with nothing before it (sqlx's
    /// `ping`, which its pool sends on acquiring an idle connection and on releasing one).
    pub fn pg_pings(&self) -> u64 {
        self.messages[PINGS]
    }

    /// PostgreSQL statements: each `Execute` (`E`) of the extended protocol and each simple
    /// `Query` (`Q`, one statement each as sqlx sends them: `BEGIN`, `COMMIT`).
    pub fn pg_statements(&self) -> u64 {
        self.messages(b'E') + self.messages(b'Q')
    }
}

/// Where [`Traffic`] counts the PostgreSQL `Sync` messages that follow no other message since
/// the previous `Sync` (pings; no message type is 1).
pub const PINGS: usize = 1;

/// Splits a PostgreSQL frontend byte stream into messages, across reads.
struct PgFrames {
    /// A message other than `Sync` since the last `Sync`.
    pending: bool,
    /// Before the startup message: untyped messages (length, then a code).
    untyped: bool,
    header: [u8; 8],
    have: usize,
    /// Bytes of the current message's body still to pass.
    skip: usize,
}

/// The codes of untyped requests that a startup message still follows.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

impl PgFrames {
    fn new() -> Self {
        Self {
            pending: false,
            untyped: true,
            header: [0; 8],
            have: 0,
            skip: 0,
        }
    }

    fn feed(&mut self, mut data: &[u8], counts: &[AtomicU64; 256]) {
        while !data.is_empty() {
            if self.skip > 0 {
                let passed = self.skip.min(data.len());
                self.skip -= passed;
                data = &data[passed..];
                continue;
            }
            let needed = if self.untyped { 8 } else { 5 };
            let taken = (needed - self.have).min(data.len());
            self.header[self.have..self.have + taken].copy_from_slice(&data[..taken]);
            self.have += taken;
            data = &data[taken..];
            if self.have < needed {
                return;
            }
            self.have = 0;
            let word = |at: usize| {
                u32::from_be_bytes([
                    self.header[at],
                    self.header[at + 1],
                    self.header[at + 2],
                    self.header[at + 3],
                ]) as usize
            };
            if self.untyped {
                // Length (itself included), then the protocol version or a request code.
                let (length, code) = (word(0), word(4));
                self.skip = length.saturating_sub(8);
                counts[0].fetch_add(1, Ordering::Relaxed);
                let code = code as u32;
                if code != SSL_REQUEST && code != GSSENC_REQUEST {
                    self.untyped = false;
                }
            } else {
                // Type, then the length (itself included, the type not).
                let kind = self.header[0];
                self.skip = word(1).saturating_sub(4);
                counts[usize::from(kind)].fetch_add(1, Ordering::Relaxed);
                match kind {
                    b'S' if !self.pending => {
                        counts[PINGS].fetch_add(1, Ordering::Relaxed);
                    }
                    // A sync or a simple query ends an exchange.
                    b'S' | b'Q' => self.pending = false,
                    _ => self.pending = true,
                }
            }
        }
    }
}

/// A TCP proxy on loopback in front of a store: counts what the store's client sends.
pub struct CountingProxy {
    /// Where the store's client connects instead of the store.
    pub addr: SocketAddr,
    /// What it counted, live.
    pub traffic: Arc<Traffic>,
}

impl CountingProxy {
    /// A proxy to `upstream`, reading the client's bytes as `protocol`.
    pub async fn start(upstream: SocketAddr, protocol: Protocol) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let traffic = Arc::new(Traffic::default());
        let counted = Arc::clone(&traffic);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let upward = async {
                        let mut buffer = vec![0u8; 64 * 1024];
                        let mut frames = (protocol == Protocol::Postgres).then(PgFrames::new);
                        loop {
                            let read = client_read.read(&mut buffer).await?;
                            if read == 0 {
                                return server_write.shutdown().await;
                            }
                            counted.bytes.fetch_add(read as u64, Ordering::Relaxed);
                            counted.writes.fetch_add(1, Ordering::Relaxed);
                            if let Some(frames) = frames.as_mut() {
                                frames.feed(&buffer[..read], &counted.messages);
                            }
                            server_write.write_all(&buffer[..read]).await?;
                        }
                    };
                    let downward = tokio::io::copy(&mut server_read, &mut client_write);
                    let _ = tokio::join!(upward, downward);
                });
            }
        });
        Ok(Self { addr, traffic })
    }
}

/// The `host:port` part of a store URL.
fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    host.split(['/', '?']).next()
}

/// The address of a store URL, on loopback.
pub fn upstream_of(url: &str) -> Result<SocketAddr, String> {
    host_of(url)
        .map(|host| host.replace("localhost", "127.0.0.1"))
        .and_then(|host| host.parse().ok())
        .ok_or(format!("{url}: expected a loopback address with a port"))
}

/// The store URL with its address replaced by the proxy's. For [`Protocol::Postgres`], add
/// `sslmode=disable` yourself when the URL may ask for TLS (see [`plaintext_postgres`]).
pub fn through(url: &str, proxy: SocketAddr) -> Result<String, String> {
    let host = host_of(url).ok_or(format!("{url}: no host"))?;
    Ok(url.replacen(host, &proxy.to_string(), 1))
}

/// A PostgreSQL URL whose client does not encrypt (`sslmode=disable` unless the URL sets a
/// mode), so that a [`Protocol::Postgres`] proxy can read its messages.
pub fn plaintext_postgres(url: &str) -> String {
    if url.contains("sslmode=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&sslmode=disable")
    } else {
        format!("{url}?sslmode=disable")
    }
}

/// One HTTP/2 connection without TLS (h2c); clone the sender for concurrent streams.
pub type H2Sender = http2::SendRequest<Full<Bytes>>;

/// Opens an h2c connection to `addr` (its driver spawned on the runtime).
pub async fn connect_h2c(addr: SocketAddr) -> Result<H2Sender, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|error| error.to_string())?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|error| error.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn postgres_messages_are_counted_across_reads() {
        let counts: [AtomicU64; 256] = std::array::from_fn(|_| AtomicU64::new(0));
        let mut stream = Vec::new();
        // An SSL request (refused), then the startup message.
        stream.extend_from_slice(&8u32.to_be_bytes());
        stream.extend_from_slice(&SSL_REQUEST.to_be_bytes());
        stream.extend_from_slice(&17u32.to_be_bytes());
        stream.extend_from_slice(&196_608u32.to_be_bytes());
        stream.extend_from_slice(b"user\0pg\0\0");
        stream.extend(message(b'Q', b"BEGIN\0"));
        stream.extend(message(b'S', &[]));
        for _ in 0..3 {
            stream.extend(message(b'B', &[0; 40]));
            stream.extend(message(b'E', &[0; 5]));
            stream.extend(message(b'S', &[]));
        }
        let mut frames = PgFrames::new();
        // One byte at a time, then in uneven chunks: the same counts.
        for byte in &stream {
            frames.feed(std::slice::from_ref(byte), &counts);
        }
        let mut frames = PgFrames::new();
        for chunk in stream.chunks(7) {
            frames.feed(chunk, &counts);
        }
        let count = |kind: u8| counts[usize::from(kind)].load(Ordering::Relaxed);
        assert_eq!(
            (count(0), count(b'Q'), count(b'B'), count(b'E'), count(b'S')),
            (4, 2, 6, 6, 8)
        );
        // The sync after the simple query is a ping; the syncs after an execute are not.
        assert_eq!(count(PINGS as u8), 2);
    }

    #[test]
    fn urls_point_at_the_proxy() {
        let proxy: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let url = "postgres://postgres@localhost:5432/test";
        assert_eq!(upstream_of(url).unwrap().port(), 5432);
        assert_eq!(
            plaintext_postgres(&through(url, proxy).unwrap()),
            "postgres://postgres@127.0.0.1:4000/test?sslmode=disable"
        );
    }
}
