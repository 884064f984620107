//! Counting what a client sends to Redis: a TCP proxy that parses every RESP command on its
//! way to the server (`REDIS_URL`) and logs its name. What the round-trip floors are measured
//! with: a script's commands run inside Redis and are not counted; each `EVALSHA` is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// `host:port` of the server at the URL in `variable`, or at `default`.
pub fn upstream(variable: &str, default: &str) -> String {
    let url = std::env::var(variable).unwrap_or_else(|_| default.to_owned());
    let rest = url.split("://").nth(1).unwrap_or(&url);
    let host_port = rest.rsplit('@').next().unwrap_or(rest);
    let host_port = host_port.split('/').next().unwrap_or(host_port);
    if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:6379")
    }
}

/// Command names sent through the proxy, in order.
pub type Log = Arc<Mutex<Vec<String>>>;

/// Parses complete RESP commands (arrays of bulk strings) at the start of `buffer`, logs their
/// names and drops them from the buffer.
fn parse_commands(buffer: &mut Vec<u8>, log: &Log) {
    loop {
        let mut at = 0;
        let line = |at: &mut usize| -> Option<Vec<u8>> {
            let end = buffer[*at..].windows(2).position(|w| w == b"\r\n")? + *at;
            let text = buffer[*at..end].to_vec();
            *at = end + 2;
            Some(text)
        };
        let Some(header) = line(&mut at) else { return };
        assert_eq!(header.first(), Some(&b'*'), "commands are arrays");
        let count: usize = std::str::from_utf8(&header[1..]).unwrap().parse().unwrap();
        let mut name = None;
        let mut complete = true;
        for _ in 0..count {
            let Some(length) = line(&mut at) else {
                complete = false;
                break;
            };
            let length: usize = std::str::from_utf8(&length[1..]).unwrap().parse().unwrap();
            if buffer.len() < at + length + 2 {
                complete = false;
                break;
            }
            if name.is_none() {
                name = Some(String::from_utf8_lossy(&buffer[at..at + length]).to_uppercase());
            }
            at += length + 2;
        }
        if !complete {
            return;
        }
        log.lock().unwrap().push(name.unwrap_or_default());
        buffer.drain(..at);
    }
}

async fn pipe_counting(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    log: Log,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while let Ok(read) = from.read(&mut chunk).await {
        if read == 0 {
            return;
        }
        // Log before forwarding: a reply can only reach the store after its command is logged.
        buffer.extend_from_slice(&chunk[..read]);
        parse_commands(&mut buffer, &log);
        if to.write_all(&chunk[..read]).await.is_err() {
            return;
        }
    }
}

/// A TCP proxy to `upstream` that logs every command name; returns its address.
pub async fn counting_proxy(upstream: String, log: Log) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                return;
            };
            let (client_read, mut client_write) = client.into_split();
            let (mut server_read, server_write) = server.into_split();
            tokio::spawn(pipe_counting(client_read, server_write, log.clone()));
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
        }
    });
    address
}

/// Runs `step` and returns the commands it sent.
pub async fn commands_of<T>(
    log: &Log,
    step: impl std::future::Future<Output = T>,
) -> (T, Vec<String>) {
    let before = log.lock().unwrap().len();
    let value = step.await;
    let sent = log.lock().unwrap()[before..].to_vec();
    (value, sent)
}
