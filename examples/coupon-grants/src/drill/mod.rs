//! The fault drill the consumer examples' tests run (feature `drill`): the service as a process
//! of its own, its output read line by line, killed with SIGKILL or stopped with SIGTERM; the
//! trades and their coupons; the [`scenarios`], written once for every broker.

pub mod scenarios;

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// A running service process.
#[derive(Debug)]
pub struct Service {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Service {
    /// Starts `program` with `vars` added to its environment.
    pub fn start(program: &str, vars: &[(&str, &str)]) -> std::io::Result<Self> {
        let mut command = Command::new(program);
        command
            .envs(vars.iter().copied())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let (sender, lines) = mpsc::unbounded_channel();
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(async move {
                let mut reader = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Self { child, lines })
    }

    /// Waits up to `limit` for an output line containing `needle`; returns it.
    pub async fn wait_for(&mut self, needle: &str, limit: Duration) -> Result<String, String> {
        let waited = tokio::time::timeout(limit, async {
            while let Some(line) = self.lines.recv().await {
                if line.contains(needle) {
                    return Ok(line);
                }
            }
            Err(format!("the service ended before printing {needle:?}"))
        })
        .await;
        waited.unwrap_or_else(|_| Err(format!("no line with {needle:?} within {limit:?}")))
    }

    /// Kills the process with SIGKILL (no clean-up of any kind) and reaps it.
    pub async fn kill(mut self) -> std::io::Result<()> {
        self.child.kill().await
    }

    /// Stops the process with SIGTERM and waits up to `limit` for it to exit; returns how it
    /// exited and the output lines not read yet.
    pub async fn terminate(mut self, limit: Duration) -> Result<(ExitStatus, Vec<String>), String> {
        let pid = self.child.id().ok_or("the service has exited already")?;
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .map_err(|error| format!("kill -TERM {pid}: {error}"))?;
        if !sent.success() {
            return Err(format!("kill -TERM {pid} failed"));
        }
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .map_err(|_| format!("the service did not exit within {limit:?} of SIGTERM"))?
            .map_err(|error| error.to_string())?;
        let mut rest = Vec::new();
        while let Some(line) = self.lines.recv().await {
            rest.push(line);
        }
        Ok((status, rest))
    }
}

/// One drill's trades: numbers under a prefix no other run uses, and their coupons.
#[derive(Debug)]
pub struct Trades {
    pool: sqlx::PgPool,
    prefix: String,
}

impl Trades {
    /// Trades named after `name` and the time, whose coupons are read from `database_url`.
    pub async fn connect(database_url: &str, name: &str) -> Result<Self, sqlx::Error> {
        let pool = sqlx::PgPool::connect(database_url).await?;
        crate::migrate(&pool).await?;
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        Ok(Self {
            pool,
            prefix: format!("{name}-{nonce}-"),
        })
    }

    /// The trade numbers' prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Trade number `n` (from 1).
    pub fn trade(&self, n: u32) -> String {
        format!("{}{n}", self.prefix)
    }

    /// Runs the gateway, `producer` (a `*_publish` binary): `trades` trades, each `copies`
    /// times, with `vars` in its environment.
    pub fn publish(
        &self,
        producer: &str,
        trades: u32,
        copies: u32,
        vars: &[(&str, &str)],
    ) -> Result<(), String> {
        let status = std::process::Command::new(producer)
            .args([
                "--trades",
                &trades.to_string(),
                "--copies",
                &copies.to_string(),
            ])
            .args(["--prefix", &self.prefix])
            .envs(vars.iter().copied())
            .status()
            .map_err(|error| format!("{producer}: {error}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{producer} exited with {status}"))
        }
    }

    /// Coupons per trade of this drill.
    pub async fn coupons(&self) -> Result<std::collections::BTreeMap<String, i64>, sqlx::Error> {
        crate::coupons_per_trade(&self.pool, &self.prefix).await
    }

    /// Waits up to `limit` until `trades` trades have a coupon.
    pub async fn wait_for_coupons(&self, trades: usize, limit: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let granted = self.coupons().await.map_err(|error| error.to_string())?;
            if granted.len() >= trades {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{} of {trades} trades have a coupon after {limit:?}",
                    granted.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether trades 1 to `trades`, and no other, have exactly one coupon each; the
    /// coupons per trade if not.
    pub async fn one_coupon_each(&self, trades: u32) -> Result<(), String> {
        let expected: std::collections::BTreeMap<String, i64> =
            (1..=trades).map(|n| (self.trade(n), 1)).collect();
        let granted = self.coupons().await.map_err(|error| error.to_string())?;
        if granted == expected {
            Ok(())
        } else {
            Err(format!(
                "coupons per trade: {granted:?}, expected one for each of {trades}"
            ))
        }
    }
}

/// Skips a test whose server is unreachable (`None`), outside CI; fails it under `CI=true`.
pub use idempotency_test::unavailable;
