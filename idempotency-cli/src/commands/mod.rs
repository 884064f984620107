//! One function per subcommand.

mod act;
mod list;
mod lookup;
mod outbox;
mod purge;
pub(crate) mod trace;

use idempotency_core::operations::Admin;
use idempotency_core::{DEFAULT_ABANDONED_GRACE, Mechanism, Scope, StorageKey};

use crate::args::{Cli, Command, Global, KeyArgs};
use crate::connect::connect;
use crate::failure::Failure;
use crate::output::Output;

/// Runs the command line's subcommand.
pub(crate) async fn run(cli: Cli) -> Result<(), Failure> {
    let Cli { global, command } = cli;
    let mut out = Output::new(global.json);
    match command {
        Command::Outbox { command } => outbox::run(&global, command, &mut out).await,
        Command::Stuck { older_than, limit } => {
            let admin = connect(&global, None, DEFAULT_ABANDONED_GRACE).await?;
            list::stuck(&admin, &global, older_than, limit, &mut out).await
        }
        Command::Stats { since, older_than } => {
            let admin = connect(&global, None, DEFAULT_ABANDONED_GRACE).await?;
            list::stats(&admin, &global, since, older_than, &mut out).await
        }
        Command::Inspect { key, body } => {
            let storage_key = storage_key(&global, &key)?;
            let admin = connect(&global, None, DEFAULT_ABANDONED_GRACE).await?;
            lookup::inspect(&admin, &storage_key, body, &mut out).await
        }
        Command::Reconcile {
            keys,
            keys_file,
            principal,
            mechanism,
        } => {
            let keys = lookup::raw_keys(keys, keys_file.as_deref())?;
            let scope = scope(&global, principal.as_deref())?;
            let mechanism = mechanism_of(&mechanism)?;
            let admin = connect(&global, None, DEFAULT_ABANDONED_GRACE).await?;
            lookup::reconcile(&admin, &scope, mechanism, &keys, &mut out).await
        }
        Command::Release { key, fence, action } => {
            let storage_key = storage_key(&global, &key)?;
            act::act(
                &global,
                &storage_key,
                &fence,
                &action,
                act::Step::Release,
                &mut out,
            )
            .await
        }
        Command::Delete { key, fence, action } => {
            let storage_key = storage_key(&global, &key)?;
            act::act(
                &global,
                &storage_key,
                &fence,
                &action,
                act::Step::Delete,
                &mut out,
            )
            .await
        }
        Command::Complete {
            key,
            fence,
            action,
            status,
            body,
            encoding,
            ttl,
        } => {
            let storage_key = storage_key(&global, &key)?;
            let outcome = act::outcome(status, &body, &encoding)?;
            let step = act::Step::Complete { outcome, ttl };
            act::act(&global, &storage_key, &fence, &action, step, &mut out).await
        }
        Command::Trace(args) => trace::trace(&global, &args, &mut out).await,
        Command::Purge {
            action,
            archive_table,
            archive_file,
            resume,
            grace,
        } => {
            let archive = purge::archive(archive_table, archive_file.as_deref())?;
            purge::purge(&global, &action, archive, resume, grace, &mut out).await
        }
    }
}

/// The scope of `--namespace` (required) and `principal`.
fn scope(global: &Global, principal: Option<&str>) -> Result<Scope, Failure> {
    let namespace = global.namespace.as_deref().ok_or_else(|| {
        Failure::Usage("--namespace is required to derive storage keys from raw keys".to_owned())
    })?;
    let scope = Scope::new(namespace);
    Ok(match principal {
        Some(principal) => scope.with_principal(principal),
        None => scope,
    })
}

fn mechanism_of(text: &str) -> Result<Mechanism, Failure> {
    Mechanism::parse(text).ok_or_else(|| {
        Failure::Usage(format!(
            "--mechanism {text:?}: one of request, function, transaction, message"
        ))
    })
}

/// The storage key `--key` (with the scope and mechanism) or `--key-hash` names.
fn storage_key(global: &Global, key: &KeyArgs) -> Result<StorageKey, Failure> {
    if let Some(hex) = &key.key_hash {
        return StorageKey::from_hex(hex)
            .ok_or_else(|| Failure::Usage(format!("--key-hash {hex:?} is not 64 hex characters")));
    }
    let raw = key
        .key
        .as_deref()
        .ok_or_else(|| Failure::Usage("--key or --key-hash is required".to_owned()))?;
    let scope = scope(global, key.principal.as_deref())?;
    Ok(Admin::storage_key(
        &scope,
        mechanism_of(&key.mechanism)?,
        raw,
    ))
}
