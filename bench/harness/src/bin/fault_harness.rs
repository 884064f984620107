//! Runs the fault harness and prints its table (the README's reliability section).
//!
//! ```text
//! cargo run --release -p idempotency-bench --features redis,postgres,mysql,sqlite \
//!     --bin fault_harness [-- --backend redis --fault pause]
//! ```
//!
//! Every backend built in, under each of its faults, unless `--backend` or `--fault` narrows
//! it. Exits 1 if a run broke a floor (printed under the table), 2 on bad arguments.

use std::process::ExitCode;

use idempotency_bench::faults::{self, Backend, Timeline};

fn main() -> ExitCode {
    axum_payments::init_logging("off");
    let mut backend = None;
    let mut fault = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--backend", Some(name)) => backend = Some(name),
            ("--fault", Some(name)) => fault = Some(name),
            _ => {
                eprintln!("usage: fault_harness [--backend NAME] [--fault NAME]");
                return ExitCode::from(2);
            }
        }
    }
    let runs: Vec<_> = Backend::ALL
        .iter()
        .filter(|b| backend.as_deref().is_none_or(|name| b.name() == name))
        .flat_map(|b| b.faults().iter().map(move |f| (*b, *f)))
        .filter(|(_, f)| fault.as_deref().is_none_or(|name| f.name() == name))
        .collect();
    if runs.is_empty() {
        eprintln!(
            "no run matches; backends: redis, postgres, mariadb, sqlite; faults: pause, restart, \
             black-hole, latency, resets, refuse, locked, disk-full"
        );
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut rows = Vec::new();
    let mut broken = Vec::new();
    for (backend, fault) in runs {
        eprintln!("{} / {} ...", backend.name(), fault.name());
        match runtime.block_on(faults::run(backend, fault, Timeline::default())) {
            Ok(report) => {
                for violation in report.violations() {
                    broken.push(format!(
                        "{} / {}: {violation}",
                        backend.name(),
                        fault.name()
                    ));
                }
                rows.push((backend, fault, report));
            }
            Err(error) => eprintln!("  skipped: {error}"),
        }
    }
    println!("{}", faults::table(&rows));
    if broken.is_empty() {
        ExitCode::SUCCESS
    } else {
        for violation in &broken {
            println!("BROKEN {violation}");
        }
        ExitCode::FAILURE
    }
}
