//! One function per subcommand.

mod act;
mod conflicts;
mod list;
mod lookup;
#[cfg(feature = "sql")]
mod outbox;
mod purge;
mod resolve;
#[cfg(feature = "sql")]
mod trace;

use idempotency_core::DEFAULT_ABANDONED_GRACE;

use crate::args::{Cli, Command, Global, RecordAction};
use crate::connect::connect;
use crate::failure::Failure;
use crate::output::Output;
use crate::store::{Audited, Kind, kind_of};

/// Runs the command line's subcommand.
pub(crate) async fn run(cli: Cli) -> Result<(), Failure> {
    let Cli { global, command } = cli;
    let mut out = Output::new(global.json);
    match command {
        #[cfg(feature = "sql")]
        Command::Outbox { command } => outbox::run(&global, command, &mut out).await,
        #[cfg(not(feature = "sql"))]
        Command::Outbox { .. } => Err(Failure::Usage(
            "the outbox lives in a SQL database: this idempotency was built without SQL stores \
             (install it with --features postgres, mysql or sqlite)"
                .to_owned(),
        )),
        Command::Stuck {
            older_than,
            limit,
            truth: None,
            ..
        } => {
            let store = connect(&global, Audited::No, DEFAULT_ABANDONED_GRACE).await?;
            list::stuck(&store, &global, older_than, limit, &mut out).await
        }
        Command::Stuck {
            older_than,
            limit,
            truth: Some(truth),
            truth_table,
        } => {
            let truth_global = truth_of(&global, truth, truth_table)?;
            let fast = connect(&global, Audited::No, DEFAULT_ABANDONED_GRACE).await?;
            let truth = connect(&truth_global, Audited::No, DEFAULT_ABANDONED_GRACE).await?;
            list::stuck_in_tiers(&fast, &truth, &global, older_than, limit, &mut out).await
        }
        Command::Conflicts { since, limit } => {
            let store = connect(&global, Audited::No, DEFAULT_ABANDONED_GRACE).await?;
            conflicts::list(&store, &global, since, limit, &mut out).await
        }
        Command::Stats { since, older_than } => {
            let store = connect(&global, Audited::No, DEFAULT_ABANDONED_GRACE).await?;
            list::stats(&store, &global, since, older_than, &mut out).await
        }
        Command::Inspect { key, body } => {
            let named = resolve::named(&global, &key)?;
            let store = connect(&global, Audited::No, DEFAULT_ABANDONED_GRACE).await?;
            let found = resolve::find(&store.admin, &named).await?;
            lookup::inspect(&found, body, &mut out)
        }
        Command::Reconcile { ids, .. } if !ids.is_empty() => {
            let ids = ids
                .iter()
                .map(|id| resolve::id(id))
                .collect::<Result<Vec<_>, _>>()?;
            let store = connect(&global, Audited::No, DEFAULT_ABANDONED_GRACE).await?;
            lookup::reconcile_ids(&store.admin, &ids, &mut out).await
        }
        Command::Reconcile {
            keys,
            keys_file,
            principal,
            mechanism,
            ..
        } => {
            let keys = lookup::raw_keys(keys, keys_file.as_deref())?;
            let scope = resolve::scope(&global, principal.as_deref())?;
            let mechanisms = resolve::mechanisms(mechanism.as_deref())?;
            let store = connect(&global, Audited::No, DEFAULT_ABANDONED_GRACE).await?;
            lookup::reconcile(&store.admin, &scope, &mechanisms, &keys, &mut out).await
        }
        Command::Release { on } => act_on(&global, &on, act::Step::Release, &mut out).await,
        Command::Delete { on } => act_on(&global, &on, act::Step::Delete, &mut out).await,
        Command::Resume { on } => act_on(&global, &on, act::Step::Resume, &mut out).await,
        Command::Complete {
            on,
            status,
            body,
            encoding,
            ttl,
        } => {
            let outcome = act::outcome(status, &body, &encoding)?;
            let step = act::Step::Complete { outcome, ttl };
            act_on(&global, &on, step, &mut out).await
        }
        #[cfg(feature = "sql")]
        Command::Trace(args) => trace::trace(&global, &args, &mut out).await,
        Command::Purge {
            action,
            archive_table,
            archive_file,
            resume,
            grace,
        } => {
            let archive = purge::archive(archive_table, archive_file.as_deref())?;
            let store = connect(&global, Audited::Yes, grace).await?;
            purge::purge(
                &store.admin,
                &global,
                &action,
                archive,
                resume,
                grace,
                &mut out,
            )
            .await
        }
    }
}

/// The options of the truth of a two-tier view: `--truth` as the store, its table
/// `--truth-table` (else `--table`); a SQL store, else a usage failure.
fn truth_of(
    global: &Global,
    truth: String,
    truth_table: Option<String>,
) -> Result<Global, Failure> {
    if matches!(kind_of(&truth)?, Kind::Redis | Kind::RedisCluster) {
        return Err(Failure::Usage(
            "--truth: the SQL truth of a two-tier consumer (postgres://, mysql://, sqlite://); \
             its fast tier is --store"
                .to_owned(),
        ));
    }
    let mut truth_global = global.clone();
    truth_global.store = Some(truth);
    truth_global.table = truth_table.or_else(|| global.table.clone());
    Ok(truth_global)
}

/// Runs `step` on the record `on` names, fenced and audited as its flags say.
async fn act_on(
    global: &Global,
    on: &RecordAction,
    step: act::Step,
    out: &mut Output,
) -> Result<(), Failure> {
    let named = resolve::named(global, &on.key)?;
    let store = connect(global, Audited::Yes, DEFAULT_ABANDONED_GRACE).await?;
    let found = resolve::find(&store.admin, &named).await?;
    act::act(&store.admin, &found, &on.fence, &on.action, step, out).await
}
