//! Duplicates of one in-flight key:
//! `cargo run --release -p idempotency-bench --features redis,postgres --bin waiters`.
//!
//! Serves one guarded route in process on 127.0.0.1 (loopback only). Its first request is held
//! in the handler; then `--waiters` duplicates of it arrive over HTTP/2 (h2c, 100 streams per
//! connection, so 10 000 waiters need 100 sockets, not 10 000), and the first is released after
//! `--hold-ms`. The layer waits up to `--wait-ms` for the first (`wait_in_flight`). Two
//! scenarios:
//!
//! - `replay`: the first finishes inside the wait bound, so every waiter gets its answer;
//! - `timeout`: the first outlives the bound, so every waiter is refused (409) at the bound.
//!
//! Reported per store and number of waiters: the answers by status; when they came (after the
//! first's answer for `replay`, after the duplicates were sent for `timeout`, p50/p99/max);
//! what reached the store (bytes and writes sent by the store client, counted by a TCP proxy on
//! loopback between the client and the store): per duplicate while they arrive (the first half
//! of the hold), and per second while they wait (the second half); and how much the process's
//! resident memory grew.
//!
//! With `--instances N` (default 1), N layers serve the route, each with its own store client
//! (as N processes sharing one store would): the first request goes to the first, the
//! duplicates are spread over all N, and what reached the store is summed over their clients.
//!
//! Options: `--stores memory,redis,postgres`, `--waiters 1,100,10000`, `--hold-ms 1500`,
//! `--wait-ms 3000`, `--instances 1`, `--only replay|timeout`, `--wake-ups on|off` (off: the
//! Redis and PostgreSQL stores do not listen, and their waiters poll); `REDIS_URL` and `DATABASE_URL` as
//! elsewhere.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use axum::serve::ListenerExt;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
#[cfg(any(feature = "redis", feature = "postgres"))]
use idempotency_bench::wire::{CountingProxy, Protocol, through, upstream_of};
use idempotency_bench::wire::{H2Sender, Traffic, connect_h2c};
use idempotency_core::{BoxStore, MemoryStore};
use idempotency_tower::IdempotencyLayer;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// Streams per HTTP/2 connection (below hyper's default limit of 200).
const STREAMS_PER_CONNECTION: usize = 100;

struct Options {
    stores: Vec<String>,
    waiters: Vec<usize>,
    hold: Duration,
    wait: Duration,
    instances: usize,
    only: Option<String>,
    wake_ups: bool,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let mut options = Self {
            stores: vec!["memory".into(), "redis".into(), "postgres".into()],
            waiters: vec![1, 100, 10_000],
            hold: Duration::from_millis(1_500),
            wait: Duration::from_millis(3_000),
            instances: 1,
            only: None,
            wake_ups: true,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            let millis = |value: &str| {
                value
                    .parse()
                    .map(Duration::from_millis)
                    .map_err(|_| format!("{flag}: not a number of milliseconds: {value}"))
            };
            match flag.as_str() {
                "--stores" => options.stores = value.split(',').map(str::to_owned).collect(),
                "--waiters" => {
                    options.waiters = value
                        .split(',')
                        .map(|n| {
                            n.parse()
                                .map_err(|_| format!("--waiters: not a number: {n}"))
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--hold-ms" => options.hold = millis(&value)?,
                "--wait-ms" => options.wait = millis(&value)?,
                "--instances" => {
                    options.instances = value
                        .parse::<usize>()
                        .map_err(|_| format!("--instances: not a number: {value}"))?
                        .max(1);
                }
                "--only" => options.only = Some(value),
                "--wake-ups" => options.wake_ups = value != "off",
                other => return Err(format!("unknown option {other}")),
            }
        }
        Ok(options)
    }
}

/// The store `name`, its client connected through a counting proxy.
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres")),
    allow(unused_variables)
)]
async fn store(name: &str, wake_ups: bool) -> Result<(BoxStore, Option<Arc<Traffic>>), String> {
    match name {
        "memory" => Ok((BoxStore::new(MemoryStore::new()), None)),
        #[cfg(feature = "redis")]
        "redis" => {
            let url =
                std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
            let proxy = CountingProxy::start(upstream_of(&url)?, Protocol::Raw)
                .await
                .map_err(|error| error.to_string())?;
            let url = through(&url, proxy.addr)?;
            let store = if wake_ups {
                idempotency_redis::RedisStore::connect(&url).await
            } else {
                idempotency_redis::connect(&url)
                    .await
                    .map(idempotency_redis::RedisStore::new)
            }
            .map_err(|error| error.to_string())?;
            Ok((BoxStore::new(store), Some(proxy.traffic)))
        }
        #[cfg(feature = "postgres")]
        "postgres" => {
            let url = std::env::var("DATABASE_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
            let proxy = CountingProxy::start(upstream_of(&url)?, Protocol::Raw)
                .await
                .map_err(|error| error.to_string())?;
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(16)
                .connect(&through(&url, proxy.addr)?)
                .await
                .map_err(|error| error.to_string())?;
            let store = idempotency_sql::PostgresStore::new(pool)
                .with_table_name("waiters_bench")
                .map_err(|error| error.to_string())?
                .with_wake_ups(wake_ups);
            store.migrate().await.map_err(|error| error.to_string())?;
            Ok((BoxStore::new(store), Some(proxy.traffic)))
        }
        other => Err(format!(
            "store {other} is not built in (features redis, postgres)"
        )),
    }
}

/// The held route: its first request waits in the handler until released.
struct Held {
    entered: Notify,
    release: Notify,
}

async fn serve(
    store: BoxStore,
    namespace: &str,
    wait: Duration,
    held: Arc<Held>,
) -> std::io::Result<SocketAddr> {
    let layer = IdempotencyLayer::builder(store)
        .namespace(namespace)
        .shared_scope()
        .wait_in_flight(wait)
        .build();
    let router = Router::new()
        .route(
            "/hold",
            post(move || {
                let held = Arc::clone(&held);
                async move {
                    held.entered.notify_one();
                    held.release.notified().await;
                    (StatusCode::CREATED, "held, then done")
                }
            }),
        )
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // Answers leave at once (no Nagle delay behind an unacknowledged one on the same socket).
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos())
}

/// One answer: its status, whether it was a replay, and when it came.
struct Answer {
    status: StatusCode,
    replayed: bool,
    at: Instant,
}

async fn send(mut sender: H2Sender, addr: SocketAddr, key: &str) -> Result<Answer, String> {
    let request = Request::post(format!("http://{addr}/hold"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{\"amount\":100}")))
        .map_err(|error| error.to_string())?;
    sender.ready().await.map_err(|error| error.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|error| error.to_string())?;
    let (parts, body) = response.into_parts();
    body.collect().await.map_err(|error| error.to_string())?;
    Ok(Answer {
        status: parts.status,
        replayed: parts.headers.contains_key("idempotent-replayed"),
        at: Instant::now(),
    })
}

/// Resident memory of this process, in KiB (Linux).
fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(duration: Duration) -> String {
    format!("{:.0}", duration.as_secs_f64() * 1e3)
}

/// What the store clients of every instance sent so far (bytes, writes), if counted.
fn sent(traffic: &[Arc<Traffic>]) -> Option<(u64, u64)> {
    (!traffic.is_empty()).then(|| {
        traffic.iter().fold((0, 0), |(bytes, writes), traffic| {
            let (b, w) = traffic.now();
            (bytes + b, writes + w)
        })
    })
}

/// One run: the first request held, `waiters` duplicates spread over `instances` layers, the
/// first released after `hold`.
async fn run(
    store_name: &str,
    waiters: usize,
    instances: usize,
    wake_ups: bool,
    hold: Duration,
    wait: Duration,
) -> Result<String, String> {
    let held = Arc::new(Held {
        entered: Notify::new(),
        release: Notify::new(),
    });
    let namespace = format!("waiters-{}", unique());
    let (mut addrs, mut traffic) = (Vec::new(), Vec::new());
    let mut memory = None;
    for _ in 0..instances {
        // Instances of the memory store share one (it is in process anyway).
        let (store, counted) = match &memory {
            Some(store) => (BoxStore::clone(store), None),
            None => store(store_name, wake_ups).await?,
        };
        if store_name == "memory" {
            memory = Some(store.clone());
        }
        traffic.extend(counted);
        let addr = serve(store, &namespace, wait, Arc::clone(&held))
            .await
            .map_err(|error| error.to_string())?;
        addrs.push(addr);
    }
    let key = format!("waiters-{}", unique());

    let first = tokio::spawn({
        let (sender, key, addr) = (connect_h2c(addrs[0]).await?, key.clone(), addrs[0]);
        async move { send(sender, addr, &key).await }
    });
    held.entered.notified().await;

    let connections = waiters.div_ceil(STREAMS_PER_CONNECTION).max(instances);
    let mut senders = Vec::with_capacity(connections);
    for n in 0..connections {
        let addr = addrs[n % instances];
        senders.push((connect_h2c(addr).await?, addr));
    }
    let memory_before = resident_kib();
    let traffic_before = sent(&traffic);
    let sent_at = Instant::now();
    let duplicates: Vec<_> = (0..waiters)
        .map(|n| {
            let (sender, addr) = senders[n % connections].clone();
            let key = key.clone();
            tokio::spawn(async move { send(sender, addr, &key).await })
        })
        .collect();
    // The first half of the hold takes the duplicates' arrivals (each claims once, unless a
    // wait for the key is already under way here); the second half is the steady wait.
    tokio::time::sleep(hold / 2).await;
    let traffic_arrived = sent(&traffic);
    tokio::time::sleep(hold - hold / 2).await;
    let memory_held = resident_kib();
    let traffic_held = sent(&traffic);
    held.release.notify_one();
    let first = first.await.map_err(|error| error.to_string())??;

    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    let (mut after_first, mut after_sent) = (Vec::new(), Vec::new());
    for duplicate in duplicates {
        match duplicate.await.map_err(|error| error.to_string())? {
            Ok(answer) => {
                let label = if answer.replayed {
                    format!("{} replayed", answer.status.as_u16())
                } else {
                    answer.status.as_u16().to_string()
                };
                *statuses.entry(label).or_default() += 1;
                after_first.push(answer.at.saturating_duration_since(first.at));
                after_sent.push(answer.at.saturating_duration_since(sent_at));
            }
            Err(error) => *statuses.entry(format!("error: {error}")).or_default() += 1,
        }
    }
    after_first.sort();
    after_sent.sort();
    let store_load = match (traffic_before, traffic_arrived, traffic_held) {
        (Some((bytes0, _)), Some((bytes1, writes1)), Some((bytes2, writes2))) => {
            let steady = (hold - hold / 2).as_secs_f64();
            format!(
                "{:.0} B | {:.0} B/s, {:.1} writes/s",
                (bytes1 - bytes0) as f64 / waiters as f64,
                (bytes2 - bytes1) as f64 / steady,
                (writes2 - writes1) as f64 / steady
            )
        }
        _ => "in process | in process".to_owned(),
    };
    Ok(format!(
        "| {store_name} | {instances} | {waiters} | {statuses:?} | {} / {} / {} | {} / {} / {} | {store_load} | {} |",
        ms(percentile(&after_first, 0.5)),
        ms(percentile(&after_first, 0.99)),
        ms(after_first.last().copied().unwrap_or_default()),
        ms(percentile(&after_sent, 0.5)),
        ms(percentile(&after_sent, 0.99)),
        ms(after_sent.last().copied().unwrap_or_default()),
        memory_held.saturating_sub(memory_before),
    ))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("waiters: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    let scenarios = [
        ("replay", options.hold, options.wait),
        ("timeout", options.wait + options.hold, options.wait),
    ];
    for (scenario, hold, wait) in scenarios {
        if options.only.as_deref().is_some_and(|only| only != scenario) {
            continue;
        }
        println!(
            "\n{scenario}: first held {} ms, duplicates wait up to {} ms\n",
            hold.as_millis(),
            wait.as_millis()
        );
        println!(
            "| store | instances | waiters | answers | after the first's answer, ms (p50 / p99 / max) | after sending, ms (p50 / p99 / max) | to the store per duplicate, arriving | to the store, steady waiting | memory growth, KiB |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        for store in &options.stores {
            for &waiters in &options.waiters {
                match run(
                    store,
                    waiters,
                    options.instances,
                    options.wake_ups,
                    hold,
                    wait,
                )
                .await
                {
                    Ok(row) => println!("{row}"),
                    Err(error) => {
                        eprintln!("waiters: {store} with {waiters} waiters: {error}");
                        return std::process::ExitCode::FAILURE;
                    }
                }
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
