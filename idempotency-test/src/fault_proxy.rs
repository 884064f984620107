//! A TCP fault proxy: sits between the code under test and a real server, passes bytes both
//! ways, and on command fails the link the ways a network and a server do.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use std::time::Duration;
//! use idempotency_test::{FaultProxy, LinkFault};
//!
//! let proxy = FaultProxy::start("127.0.0.1:6379").await?;
//! let url = format!("redis://{}", proxy.addr()); // connect the store here
//! proxy.set(LinkFault::BlackHole); // commands go out, no answer comes back
//! tokio::time::sleep(Duration::from_secs(3)).await;
//! proxy.set(LinkFault::None); // what was held is delivered, late
//! proxy.reset(); // every open connection gets a TCP reset
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How the link fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkFault {
    /// Bytes pass as they come.
    None,
    /// Every chunk, either way, is held this long before it is passed on (a slow link or a
    /// slow server: beyond the store timeout, calls time out and their commands land late).
    Latency(Duration),
    /// Nothing passes either way; bytes sent meanwhile are held, as a link that is down holds
    /// them in the sender's retransmits, and delivered once the fault is lifted (unless the
    /// connection was reset meanwhile). New connections are accepted and get nothing through.
    BlackHole,
    /// The server is down: open connections are reset, new ones are reset as they come.
    Refuse,
}

/// A running proxy to one upstream address; stopped, with its connections, when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<LinkFault>,
    /// Bumped by [`reset`](Self::reset): every connection open then is reset.
    resets: watch::Sender<u64>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: impl ToSocketAddrs) -> std::io::Result<Self> {
        let upstream = tokio::net::lookup_host(upstream)
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other("the upstream address resolves to nothing"))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (fault, _) = watch::channel(LinkFault::None);
        let (resets, _) = watch::channel(0);
        let accept = tokio::spawn(accept(
            listener,
            upstream,
            fault.subscribe(),
            resets.subscribe(),
        ));
        Ok(Self {
            addr,
            fault,
            resets,
            accept,
        })
    }

    /// The address to connect to instead of the server's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Fails the link from now on as `fault` says ([`LinkFault::None`] heals it).
    pub fn set(&self, fault: LinkFault) {
        self.fault.send_replace(fault);
        if fault == LinkFault::Refuse {
            self.reset();
        }
    }

    /// The fault in force.
    pub fn fault(&self) -> LinkFault {
        *self.fault.borrow()
    }

    /// Resets every open connection (a TCP RST each way), whatever it was doing: commands
    /// held or half sent are lost. New connections are not affected.
    pub fn reset(&self) {
        self.resets.send_modify(|generation| *generation += 1);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Connections end as they see the senders gone.
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("fault", &self.fault())
            .finish()
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    fault: watch::Receiver<LinkFault>,
    resets: watch::Receiver<u64>,
) {
    while let Ok((client, _)) = listener.accept().await {
        if *fault.borrow() == LinkFault::Refuse {
            abort(&client);
            continue;
        }
        tokio::spawn(relay(client, upstream, fault.clone(), resets.clone()));
    }
}

/// Drops a connection with a reset rather than a clean close.
fn abort(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Relays one connection until either side closes it, the proxy resets it or is dropped.
async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    fault: watch::Receiver<LinkFault>,
    mut resets: watch::Receiver<u64>,
) {
    resets.mark_unchanged();
    let server = tokio::select! {
        connected = TcpStream::connect(upstream) => connected,
        _ = resets.changed() => return abort(&client),
    };
    let Ok(server) = server else {
        return abort(&client);
    };
    // Each socket is dropped with a reset (linger 0) rather than a clean close: at a reset, or
    // once both ways are shut down anyway.
    for stream in [&client, &server] {
        let _ = stream.set_nodelay(true);
        abort(stream);
    }
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, fault.clone());
    let down = pump(server_read, client_write, fault);
    tokio::select! {
        _ = async { tokio::join!(up, down) } => {}
        // A reset, or the proxy dropped (the sender gone): both sockets are dropped here.
        _ = resets.changed() => {}
    }
}

/// Passes bytes from `from` to `to` as the fault allows, until `from` closes (then `to` is shut
/// down for writing) or either fails.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut fault: watch::Receiver<LinkFault>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if !passable(&mut fault).await || to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Waits until a chunk may pass: at once, after the latency, or once a black hole is lifted;
/// `false` if it never may (refused, or the proxy is gone).
async fn passable(fault: &mut watch::Receiver<LinkFault>) -> bool {
    loop {
        let now = *fault.borrow_and_update();
        match now {
            LinkFault::None => return true,
            LinkFault::Latency(delay) => {
                tokio::time::sleep(delay).await;
                return true;
            }
            LinkFault::Refuse => return false,
            LinkFault::BlackHole => {
                if fault.changed().await.is_err() {
                    return false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free port.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.into_split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    async fn round_trip(stream: &mut TcpStream, within: Duration) -> std::io::Result<Vec<u8>> {
        stream.write_all(b"ping").await?;
        let mut reply = [0u8; 4];
        match tokio::time::timeout(within, stream.read_exact(&mut reply)).await {
            Ok(read) => read.map(|_| reply.to_vec()),
            Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }

    #[tokio::test]
    async fn passes_holds_delays_resets_and_refuses() {
        let proxy = FaultProxy::start(echo().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        let second = Duration::from_secs(5);
        assert_eq!(round_trip(&mut stream, second).await.unwrap(), b"ping");

        // Held while black-holed, delivered once healed.
        proxy.set(LinkFault::BlackHole);
        let held = round_trip(&mut stream, Duration::from_millis(200)).await;
        assert_eq!(held.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        proxy.set(LinkFault::None);
        let mut late = [0u8; 4];
        stream.read_exact(&mut late).await.unwrap();
        assert_eq!(&late, b"ping");

        // Delayed by the latency (each way).
        proxy.set(LinkFault::Latency(Duration::from_millis(100)));
        let started = std::time::Instant::now();
        assert_eq!(round_trip(&mut stream, second).await.unwrap(), b"ping");
        assert!(started.elapsed() >= Duration::from_millis(200));
        proxy.set(LinkFault::None);

        // Reset: the open connection fails, a new one works.
        proxy.reset();
        let failed = round_trip(&mut stream, second).await;
        assert!(failed.is_err(), "{failed:?}");
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut fresh, second).await.unwrap(), b"ping");

        // Refused: open and new connections fail until healed.
        proxy.set(LinkFault::Refuse);
        assert!(round_trip(&mut fresh, second).await.is_err());
        let mut refused = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut refused, second).await.is_err());
        proxy.set(LinkFault::None);
        let mut back = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut back, second).await.unwrap(), b"ping");
    }
}
