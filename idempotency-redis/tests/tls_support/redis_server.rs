//! A private `redis-server` that speaks TLS only (`--port 0 --tls-port …`), on a free loopback
//! port, with its certificate and key in a temporary directory; killed and cleaned up when
//! dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idempotency_test::{unavailable, unique_key};

use super::free_port;
use idempotency_test::pki::Pki;

/// The running server and its files.
pub struct TlsRedis {
    /// Its TLS port on 127.0.0.1 (it has no plain port).
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl TlsRedis {
    /// Starts the server with `pki`'s server certificate. `None` (with the reason printed)
    /// where `redis-server` is missing or cannot serve TLS, outside CI; under `CI=true` that
    /// panics.
    pub async fn start(pki: &Pki) -> Option<Self> {
        let dir =
            std::env::temp_dir().join(format!("idempotency-tls-{}", &unique_key().to_hex()[..12]));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path.to_str().unwrap().to_owned()
        };
        let cert = file("server.pem", &pki.server_cert_pem);
        let key = file("server.key", &pki.server_key_pem);
        let ca = file("ca.pem", &pki.ca_pem);
        let port = free_port();
        let spawned = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args(["--tls-cert-file", &cert, "--tls-key-file", &key])
            .args(["--tls-ca-cert-file", &ca, "--tls-auth-clients", "no"])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                dir.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return unavailable("redis-server binary", error);
            }
        };
        let mut server = Self { port, child, dir };
        for _ in 0..100 {
            if let Some(status) = server.child.try_wait().unwrap() {
                // A build without TLS support rejects `--tls-port` and exits at once.
                return unavailable("redis-server with TLS", format!("it exited: {status}"));
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Some(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server did not listen on its TLS port {port}");
    }

    /// `rediss://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
