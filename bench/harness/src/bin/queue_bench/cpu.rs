//! CPU time per message, by process: the bench itself, the PostgreSQL backends serving its pool
//! (found by the pool's `application_name`), Redis, and the broker. Read from
//! `/proc/<pid>/task/*/schedstat` (nanoseconds on a CPU, every thread), so it does not depend
//! on what else the machine runs; a process that is absent counts 0.

use std::collections::HashMap;
use std::sync::OnceLock;

use sqlx::PgPool;

use crate::Error;

/// Where each part of a message's cost runs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cpu {
    /// This process (the consumer and its clients), ns.
    pub(crate) bench: u64,
    /// The PostgreSQL backends of the bench's pool, ns.
    pub(crate) postgres: u64,
    /// `redis-server`, ns (the whole server).
    pub(crate) redis: u64,
    /// The broker's server (`beam.smp` or `nats-server`), ns.
    pub(crate) broker: u64,
}

impl Cpu {
    pub(crate) fn total(&self) -> u64 {
        self.bench + self.postgres + self.redis + self.broker
    }

    /// Microseconds per message of `ns`.
    pub(crate) fn per_message(ns: u64, messages: usize) -> f64 {
        ns as f64 / 1000.0 / messages as f64
    }
}

/// What a run's CPU is read from.
pub(crate) struct Meter {
    pool: PgPool,
    application_name: String,
    redis: Option<u32>,
    brokers: HashMap<&'static str, Option<u32>>,
}

/// CPU times at the start of a run.
pub(crate) struct Mark {
    bench: u64,
    postgres: HashMap<u32, u64>,
    redis: u64,
    broker: u64,
    broker_name: &'static str,
}

static METER: OnceLock<Meter> = OnceLock::new();

/// Sets the meter up once: the bench's pool (connected with `application_name`).
pub(crate) fn install(pool: PgPool, application_name: String) {
    let brokers = HashMap::from([
        ("rabbitmq", process_named("beam.smp")),
        ("nats", process_named("nats-server")),
    ]);
    let _ = METER.set(Meter {
        pool,
        application_name,
        redis: process_named("redis-server"),
        brokers,
    });
}

pub(crate) fn meter() -> Result<&'static Meter, Error> {
    Ok(METER.get().ok_or("the CPU meter is installed first")?)
}

impl Meter {
    async fn backends(&self) -> Result<HashMap<u32, u64>, Error> {
        let pids: Vec<i32> =
            sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE application_name = $1")
                .bind(&self.application_name)
                .fetch_all(&self.pool)
                .await?;
        Ok(pids
            .into_iter()
            .filter_map(|pid| u32::try_from(pid).ok())
            .map(|pid| (pid, on_cpu(pid)))
            .collect())
    }

    /// The CPU times now, for a run on `broker` ("rabbitmq" or "nats").
    pub(crate) async fn mark(&self, broker: &'static str) -> Result<Mark, Error> {
        let broker_pid = self.brokers.get(broker).copied().flatten();
        Ok(Mark {
            bench: on_cpu(std::process::id()),
            postgres: self.backends().await?,
            redis: self.redis.map_or(0, on_cpu),
            broker: broker_pid.map_or(0, on_cpu),
            broker_name: broker,
        })
    }

    /// The CPU spent since `start`.
    pub(crate) async fn since(&self, start: &Mark) -> Result<Cpu, Error> {
        let now = self.mark(start.broker_name).await?;
        let postgres = now
            .postgres
            .iter()
            .map(|(pid, ns)| ns.saturating_sub(start.postgres.get(pid).copied().unwrap_or(0)))
            .sum();
        Ok(Cpu {
            bench: now.bench.saturating_sub(start.bench),
            postgres,
            redis: now.redis.saturating_sub(start.redis),
            broker: now.broker.saturating_sub(start.broker),
        })
    }
}

/// Nanoseconds every thread of `pid` has spent on a CPU (0 if it is gone).
fn on_cpu(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The first process whose `comm` is `name`.
fn process_named(name: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
}
