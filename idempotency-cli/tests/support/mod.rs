//! What the binary's tests share: running it as an operator does, with only the settings
//! a test gives it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::{Command, Stdio};

use serde_json::Value;

/// What one run of the binary gave.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// The JSON objects printed, one per line.
    pub(crate) fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
            .collect()
    }
}

/// The environment variables the binary reads its settings from.
const SETTINGS_ENV: [&str; 6] = [
    "IDEMPOTENCY_STORE_URL",
    "IDEMPOTENCY_TABLE",
    "IDEMPOTENCY_PREFIX",
    "IDEMPOTENCY_AUDIT_TABLE",
    "IDEMPOTENCY_OUTBOX_TABLE",
    "IDEMPOTENCY_ACTOR",
];

/// Runs `idempotency` with `args`, stdin closed (no terminal: destructive actions need --yes).
pub(crate) fn idempotency(args: &[&str]) -> Run {
    idempotency_with_env(args, &[])
}

/// Runs `idempotency` with `args` and only the settings of `env` in its environment.
pub(crate) fn idempotency_with_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idempotency"));
    for name in SETTINGS_ENV {
        command.env_remove(name);
    }
    let output = command
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run idempotency");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs and expects exit code `code`.
pub(crate) fn expect(code: i32, args: &[&str]) -> Run {
    let run = idempotency(args);
    assert_eq!(
        run.code, code,
        "idempotency {args:?}\nstdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    run
}

pub(crate) fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}
