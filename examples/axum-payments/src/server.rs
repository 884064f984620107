//! Serving a router (or any [`HttpService`]) on a loopback port, in-process (tests, the demo, the load generator).

use std::io;
use std::net::SocketAddr;

use axum::ServiceExt;
use axum::extract::Request;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::routes::HttpService;

/// A service served in the background until [`shutdown`](Self::shutdown) (or drop).
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl Server {
    /// Serves `service` on an ephemeral port of 127.0.0.1.
    pub async fn spawn(service: impl HttpService) -> io::Result<Self> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        Self::spawn_on(listener, service)
    }

    /// Serves `service` on a bound listener (`TCP_NODELAY` on every connection).
    pub fn spawn_on(listener: TcpListener, service: impl HttpService) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let listener = listener.tap_io(|tcp| {
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::warn!(%error, "could not set TCP_NODELAY");
            }
        });
        let task = tokio::spawn(async move {
            let service = ServiceExt::<Request>::into_make_service(service);
            axum::serve(listener, service)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(Self {
            addr,
            stop: Some(stop),
            task,
        })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets open requests finish, and waits for the server to end.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(join) => Err(io::Error::other(join)),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
