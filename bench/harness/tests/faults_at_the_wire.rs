//! The fault harness (`idempotency_bench::faults`) as tests: each backend under each of its
//! faults, through the HTTP layer, under load. A run's checker report must keep every floor: no
//! key runs twice, every success is backed by one execution and replays at the end, every key
//! refused during the fault runs after it, no key answers 409 without an owner more than a
//! second after recovery, no answer takes longer than the store timeout plus a second, every
//! refusal carries `Retry-After`. The timings are the report's (`fault_harness` prints them),
//! not assertions. Shared servers are reached through a fault proxy; the Redis pause and
//! restart use a `redis-server` of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use idempotency_bench::faults::{self, Backend, Fault, Timeline, Unavailable};

async fn holds(backend: Backend, fault: Fault) {
    match faults::run(backend, fault, Timeline::default()).await {
        Ok(report) => {
            let broken = report.violations();
            assert!(
                broken.is_empty(),
                "{} / {}: {}\n{}",
                backend.name(),
                fault.name(),
                broken.join("; "),
                faults::table(&[(backend, fault, report.clone())])
            );
        }
        Err(Unavailable::Missing(reason)) => {
            idempotency_test::unavailable::<()>(backend.name(), reason);
        }
        Err(Unavailable::Failed(reason)) => panic!("{}: {reason}", fault.name()),
    }
}

macro_rules! runs {
    ($feature:literal, $backend:ident: $($name:ident => $fault:ident),+ $(,)?) => {$(
        #[cfg(feature = $feature)]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            holds(Backend::$backend, Fault::$fault).await;
        }
    )+};
}

runs!("redis", Redis:
    redis_paused => Pause,
    redis_restarted => Restart,
    redis_black_holed => BlackHole,
    redis_slow => Latency,
    redis_reset => Resets,
    redis_refused => Refuse,
);
runs!("postgres", Postgres:
    postgres_black_holed => BlackHole,
    postgres_slow => Latency,
    postgres_reset => Resets,
    postgres_refused => Refuse,
);
runs!("mysql", MariaDb:
    mariadb_black_holed => BlackHole,
    mariadb_slow => Latency,
    mariadb_reset => Resets,
    mariadb_refused => Refuse,
);
runs!("sqlite", Sqlite:
    sqlite_locked => Locked,
    sqlite_full => DiskFull,
);
