//! The benchmarks BENCHMARKS.md gives commands for, each run once on a small load against the
//! real services: a benchmark that no longer runs (a schema change its hand-written SQL did not
//! follow, a hang past a client's limit) fails here, not on the next person who measures. Each
//! binary checks its own work (rows committed, answers by status) and exits non-zero when it
//! finds a fault; these tests also require its table, one row per variant asked for. The
//! numbers are not asserted: a small load on a busy machine measures nothing.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// The services the benchmarks reach: name, URL variable, local default.
const POSTGRES: (&str, &str, &str) = (
    "PostgreSQL",
    "DATABASE_URL",
    "postgres://postgres@127.0.0.1:5432/test",
);
const REDIS: (&str, &str, &str) = ("Redis", "REDIS_URL", "redis://127.0.0.1:6379");
const RABBITMQ: (&str, &str, &str) = (
    "RabbitMQ",
    "AMQP_URL",
    "amqp://guest:guest@127.0.0.1:5672/%2f",
);
const NATS: (&str, &str, &str) = ("NATS", "NATS_URL", "nats://127.0.0.1:4222");

/// Whether every one of `services` accepts a connection; the first that does not is reported
/// unavailable (a failure in CI, a printed skip elsewhere).
fn reachable(services: &[(&str, &str, &str)]) -> bool {
    services.iter().all(|&(name, variable, default)| {
        let url = std::env::var(variable).unwrap_or_else(|_| default.to_owned());
        let authority = url.split("://").nth(1).unwrap_or(&url);
        let host_port = authority
            .split('/')
            .next()
            .unwrap_or_default()
            .rsplit('@')
            .next()
            .unwrap_or_default();
        let connected = std::net::ToSocketAddrs::to_socket_addrs(host_port)
            .map_err(|error| error.to_string())
            .and_then(|mut addresses| addresses.next().ok_or_else(|| "no address".to_owned()))
            .and_then(|address| {
                std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_secs(2))
                    .map_err(|error| error.to_string())
            });
        match connected {
            Ok(_) => true,
            Err(error) => {
                idempotency_test::unavailable::<()>(name, format!("{url}: {error}"));
                false
            }
        }
    })
}

/// Runs `binary` with `args` and `env`, and returns what it printed (standard output, then
/// standard error); panics, with both, unless it succeeded.
fn run(binary: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let output = Command::new(binary)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the benchmark starts");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success(),
        "{binary} {args:?} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    format!("{stdout}\n{stderr}")
}

/// The table rows of `output` (lines `| … |` after a header), whose first cells contain
/// `label`.
fn rows<'a>(output: &'a str, label: &str) -> Vec<&'a str> {
    output
        .lines()
        .filter(|line| line.starts_with('|') && !line.starts_with("|---"))
        .filter(|line| line.contains(label))
        .collect()
}

#[cfg(all(feature = "queue", feature = "redis"))]
#[test]
fn queue_bench_runs_every_variant_on_both_brokers() {
    if !reachable(&[POSTGRES, REDIS, RABBITMQ, NATS]) {
        return;
    }
    let output = run(
        env!("CARGO_BIN_EXE_queue_bench"),
        &[],
        &[
            ("BENCH_MESSAGES", "200"),
            ("BENCH_ROUNDS", "1"),
            ("BENCH_COUNT", "20"),
        ],
    );
    // Every committing variant's business rows were counted against what it consumed.
    assert!(
        output.contains("round 1 done; business rows"),
        "no round:\n{output}"
    );
    for variant in [
        "the post-mortem's consumer by hand",
        "two tiers, new keys",
        "two tiers, later copies",
    ] {
        assert!(
            !rows(&output, variant).is_empty(),
            "no row {variant}:\n{output}"
        );
    }
    assert!(
        output.contains("two tiers, new keys / post-mortem"),
        "no ratio:\n{output}"
    );
}

#[cfg(feature = "sqlite")]
#[test]
fn callback_bench_runs_on_postgres() {
    if !reachable(&[POSTGRES]) {
        return;
    }
    let output = run(
        env!("CARGO_BIN_EXE_callback_bench"),
        &[
            "--store",
            "postgres",
            "--seconds",
            "1",
            "--rounds",
            "1",
            "--connections",
            "4",
            "--orders",
            "10000",
        ],
        &[],
    );
    // Both scenarios, each variant once, every request answered 200 (replays included).
    let runs: Vec<&str> = output
        .lines()
        .filter(|line| line.contains(" requests in "))
        .collect();
    assert_eq!(runs.len(), 8, "two scenarios of four variants:\n{output}");
    for run in runs {
        let statuses = run.rsplit_once(": ").map_or("", |(_, statuses)| statuses);
        assert!(
            statuses.starts_with("200×") && statuses.matches('×').count() == 1,
            "a request not answered 200: {run}\n{output}"
        );
    }
    assert_eq!(
        output.matches("transactional / by hand").count(),
        2,
        "{output}"
    );
}

#[cfg(feature = "redis")]
#[test]
fn waiters_answers_every_duplicate() {
    if !reachable(&[POSTGRES, REDIS]) {
        return;
    }
    let output = run(
        env!("CARGO_BIN_EXE_waiters"),
        &[
            "--stores",
            "memory,redis,postgres",
            "--waiters",
            "20",
            "--hold-ms",
            "300",
            "--instances",
            "2",
            "--only",
            "replay",
        ],
        &[],
    );
    // The first finishes inside the wait bound: every duplicate gets its stored answer.
    for store in ["memory", "redis", "postgres"] {
        let rows = rows(&output, &format!("| {store} |"));
        assert_eq!(rows.len(), 1, "rows of {store}:\n{output}");
        assert!(
            rows[0].contains(r#"{"201 replayed": 20}"#),
            "{store}: not every duplicate got the first's answer:\n{output}"
        );
    }
}

#[test]
fn steps_bench_runs_each_variant() {
    if !reachable(&[POSTGRES]) {
        return;
    }
    let output = run(
        env!("CARGO_BIN_EXE_steps"),
        &[
            "--runs",
            "40",
            "--rounds",
            "1",
            "--warmup",
            "5",
            "--concurrency",
            "2",
            "--count-runs",
            "5",
        ],
        &[],
    );
    for variant in ["hand-written", "steps"] {
        assert!(
            !rows(&output, variant).is_empty(),
            "no row {variant}:\n{output}"
        );
    }
}

#[cfg(feature = "outbox")]
#[test]
fn outbox_bench_runs() {
    if !reachable(&[POSTGRES, RABBITMQ]) {
        return;
    }
    let output = run(
        env!("CARGO_BIN_EXE_outbox_bench"),
        &[],
        &[
            ("BENCH_TXS", "50"),
            ("BENCH_MESSAGES", "200"),
            ("BENCH_TRADES", "5"),
        ],
    );
    // Every message enqueued was relayed, by one relay and by two, and the trades reached the
    // coupon service.
    assert!(
        output.contains("relay (claim, publish, confirm, mark)"),
        "no relay:\n{output}"
    );
    assert_eq!(
        output.matches("(200 sent)").count(),
        2,
        "one relay and two, each sending every message:\n{output}"
    );
    assert!(output.contains("commit -> coupon committed"), "{output}");
}
