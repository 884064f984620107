//! Driving a served service with load from this process: keep-alive HTTP/1.1 connections
//! (hyper) over loopback, or concurrent callers of the service itself, each run bounded in time
//! and in request count; and what a run measured. Shared by the load generators (`loadgen`,
//! `callback_bench`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::ServiceExt;

use axum_payments::client::Connection;
use axum_payments::{HttpService, Server};

/// How a run drives the service.
#[derive(Clone, Debug)]
pub struct Drive {
    /// How long a run lasts.
    pub seconds: f64,
    /// Concurrent callers.
    pub connections: usize,
    /// The most requests a run sends.
    pub max_requests: u64,
}

/// What a run drives: a served service over TCP, or the service itself, in-process (no TCP:
/// the layer's own CPU cost without HTTP parsing and the kernel).
pub enum Target<'a, S> {
    /// Keep-alive connections to the server.
    Tcp(&'a Server),
    /// Calls of the service.
    InProcess(&'a S),
}

impl<S> Clone for Target<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Target<'_, S> {}

/// What one run measured.
#[derive(Default)]
pub struct RunResult {
    /// Answers received.
    pub requests: u64,
    /// Answers marked `Idempotent-Replayed`.
    pub replayed: u64,
    /// Answers by status.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests that got no answer.
    pub errors: u64,
    /// How long the run took.
    pub elapsed: Duration,
    /// CPU time of the whole process (client + server + the kernel on their behalf).
    pub cpu: Option<Duration>,
}

impl RunResult {
    /// Answers per second.
    pub fn throughput(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// Microseconds of process CPU per request.
    pub fn cpu_per_request(&self) -> Option<f64> {
        let cpu = self.cpu?;
        (self.requests > 0).then(|| cpu.as_secs_f64() * 1e6 / self.requests as f64)
    }
}

/// User + system CPU time of this process so far, from `/proc/self/stat` (Linux; clock ticks of
/// 1/100 s). `None` elsewhere.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The machine's 1, 5 and 15 minute load averages (`/proc/loadavg`; `?` elsewhere): numbers
/// from a shared machine mean little without them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "?".to_owned())
}

/// Where requests go: a keep-alive connection, or the service itself.
enum Sender<S> {
    Tcp(Connection),
    InProcess(S),
}

/// What a caller needs from an answer.
struct Answer {
    status: StatusCode,
    replayed: bool,
}

impl<S: HttpService> Sender<S> {
    async fn send(&mut self, request: Request<Full<Bytes>>) -> Result<Answer, String> {
        match self {
            Self::Tcp(connection) => {
                let reply = connection.send(request).await.map_err(|e| e.to_string())?;
                Ok(Answer {
                    status: reply.status,
                    replayed: reply.is_replay(),
                })
            }
            Self::InProcess(service) => {
                let ready = ServiceExt::<axum::extract::Request>::ready(service)
                    .await
                    .map_err(|e| e.to_string())?;
                let response = ready
                    .call(request.map(axum::body::Body::new))
                    .await
                    .map_err(|e| e.to_string())?;
                let (parts, body) = response.into_parts();
                body.collect().await.map_err(|e| e.to_string())?;
                Ok(Answer {
                    status: parts.status,
                    replayed: parts.headers.contains_key("idempotent-replayed"),
                })
            }
        }
    }
}

/// Builds the request a caller (by index) sends as its `sequence`-th.
pub type MakeRequest =
    dyn Fn(usize, u64) -> Result<Request<Full<Bytes>>, http::Error> + Send + Sync;

/// Drives `target` with `options.connections` callers until the time or count bound.
pub async fn drive<S: HttpService>(
    target: Target<'_, S>,
    options: &Drive,
    make_request: Arc<MakeRequest>,
) -> Result<RunResult, String> {
    let mut connections = Vec::with_capacity(options.connections);
    for _ in 0..options.connections {
        connections.push(match target {
            Target::InProcess(service) => Sender::InProcess(service.clone()),
            Target::Tcp(server) => Sender::Tcp(
                Connection::open(server.addr())
                    .await
                    .map_err(|e| e.to_string())?,
            ),
        });
    }
    let issued = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let max = options.max_requests;
    let cpu_before = process_cpu();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(options.seconds);
    let mut tasks = Vec::with_capacity(connections.len());
    for (index, mut connection) in connections.into_iter().enumerate() {
        let issued = Arc::clone(&issued);
        let stop = Arc::clone(&stop);
        let make_request = Arc::clone(&make_request);
        tasks.push(tokio::spawn(async move {
            let mut result = RunResult::default();
            let mut sequence = 0u64;
            while !stop.load(Ordering::Relaxed) && issued.fetch_add(1, Ordering::Relaxed) < max {
                let Ok(request) = make_request(index, sequence) else {
                    result.errors += 1;
                    break;
                };
                match connection.send(request).await {
                    Ok(answer) => {
                        result.requests += 1;
                        result.replayed += u64::from(answer.replayed);
                        *result.statuses.entry(answer.status.as_u16()).or_default() += 1;
                    }
                    Err(_) => {
                        result.errors += 1;
                        break;
                    }
                }
                sequence += 1;
                if Instant::now() >= deadline {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            result
        }));
    }
    let mut total = RunResult::default();
    for task in tasks {
        let part = task.await.map_err(|e| e.to_string())?;
        total.requests += part.requests;
        total.replayed += part.replayed;
        total.errors += part.errors;
        for (status, n) in part.statuses {
            *total.statuses.entry(status).or_default() += n;
        }
    }
    total.elapsed = started.elapsed();
    total.cpu = process_cpu()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    Ok(total)
}

/// The median of `values` (sorted in place).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A run in one line: requests, time, statuses, replays, errors.
pub fn describe(result: &RunResult) -> String {
    let statuses: Vec<String> = result
        .statuses
        .iter()
        .map(|(status, n)| format!("{status}×{n}"))
        .collect();
    format!(
        "{} requests in {:.2} s: {}{}{}",
        result.requests,
        result.elapsed.as_secs_f64(),
        statuses.join(", "),
        if result.replayed > 0 {
            format!(" ({} replayed)", result.replayed)
        } else {
            String::new()
        },
        if result.errors > 0 {
            format!(", {} errors", result.errors)
        } else {
            String::new()
        }
    )
}
