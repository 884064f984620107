//! From what an operator names (a raw key, or a storage key as listed) to the record, and
//! which front end wrote it, without the operator knowing how each front end derives its keys.

use idempotency_core::{Mechanism, Record, Scope, StorageKey};
use idempotency_operations::Admin;

use crate::args::{Global, KeyArgs};
use crate::failure::Failure;

/// The fewest hex characters of an id that name a record.
pub(crate) const MIN_ID_PREFIX: usize = 8;

/// A record found by what the operator named.
pub(crate) struct Found {
    /// Its storage key.
    pub(crate) key: StorageKey,
    /// The record as read.
    pub(crate) record: Record,
    /// The front end that wrote it, when it was found by its raw key.
    pub(crate) mechanism: Option<Mechanism>,
}

/// The front end a record's key derivation names, in an operator's words: `http/grpc` (the
/// HTTP and gRPC layers), `function` (`#[idempotent]`), `transaction` (a claim in a SQL
/// transaction), `consumer` (a queue consumer, in both its tiers).
pub(crate) fn mechanism_name(mechanism: Mechanism) -> &'static str {
    match mechanism {
        Mechanism::Request => "http/grpc",
        Mechanism::Function => "function",
        Mechanism::Transaction => "transaction",
        Mechanism::Message => "consumer",
        _ => "other",
    }
}

/// The front ends `--mechanism` names: one, in an operator's words or the derivation's own
/// names, or every one when not given.
pub(crate) fn mechanisms(named: Option<&str>) -> Result<Vec<Mechanism>, Failure> {
    let Some(name) = named else {
        return Ok(Mechanism::ALL.to_vec());
    };
    let mechanism = match name.to_ascii_lowercase().as_str() {
        "http" | "grpc" | "http/grpc" | "request" => Mechanism::Request,
        "function" => Mechanism::Function,
        "transaction" => Mechanism::Transaction,
        "consumer" | "message" => Mechanism::Message,
        _ => {
            return Err(Failure::Usage(format!(
                "--mechanism {name:?}: one of http (or grpc), function, transaction, consumer; \
                 or leave it out to look for every one"
            )));
        }
    };
    Ok(vec![mechanism])
}

/// The scope of `--namespace` (required) and `principal`.
pub(crate) fn scope(global: &Global, principal: Option<&str>) -> Result<Scope, Failure> {
    let namespace = global.namespace.as_deref().ok_or_else(|| {
        Failure::Usage("--namespace is required to derive storage keys from raw keys".to_owned())
    })?;
    let scope = Scope::new(namespace);
    Ok(match principal {
        Some(principal) => scope.with_principal(principal),
        None => scope,
    })
}

/// The storage keys `raw` has under each of `mechanisms` in `scope`, in that order.
pub(crate) fn candidates(
    scope: &Scope,
    mechanisms: &[Mechanism],
    raw: &str,
) -> Vec<(Mechanism, StorageKey)> {
    mechanisms
        .iter()
        .map(|mechanism| (*mechanism, Admin::storage_key(scope, *mechanism, raw)))
        .collect()
}

/// What the operator named, checked before connecting: a record's id, or a raw key in a
/// scope under the front ends to look in.
pub(crate) enum Named {
    /// `--key-hash`: an id, whole or a prefix (lowercase hex).
    Id(String),
    /// `--key` with its scope and `--mechanism`.
    Raw {
        /// The raw key.
        raw: String,
        /// Its scope.
        scope: Scope,
        /// The front ends whose records are looked for.
        mechanisms: Vec<Mechanism>,
    },
}

/// What `key` names: a usage failure (exit 2) when it names nothing.
pub(crate) fn named(global: &Global, key: &KeyArgs) -> Result<Named, Failure> {
    if let Some(hex) = &key.key_hash {
        return id(hex).map(Named::Id);
    }
    let raw = key
        .key
        .clone()
        .ok_or_else(|| Failure::Usage("--key or --key-hash is required".to_owned()))?;
    Ok(Named::Raw {
        raw,
        scope: scope(global, key.principal.as_deref())?,
        mechanisms: mechanisms(key.mechanism.as_deref())?,
    })
}

/// The record `named` names, under whichever front end wrote it (every candidate read). No
/// record is a not-found failure (exit 5); records of one raw key from several front ends ask
/// for `--mechanism` (exit 2).
pub(crate) async fn find(admin: &Admin, named: &Named) -> Result<Found, Failure> {
    let (raw, scope, mechanisms) = match named {
        Named::Id(hex) => {
            let record = by_id(admin, hex).await?.ok_or_else(|| {
                Failure::NotFound(format!(
                    "no record {hex} (released, expired, deleted, or in another store or table)"
                ))
            })?;
            return Ok(Found {
                key: record.key,
                record,
                mechanism: None,
            });
        }
        Named::Raw {
            raw,
            scope,
            mechanisms,
        } => (raw, scope, mechanisms),
    };
    let candidates = candidates(scope, mechanisms, raw);
    let keys: Vec<StorageKey> = candidates.iter().map(|(_, key)| *key).collect();
    let records = admin.reconcile(&keys).await?;
    let mut found: Vec<Found> = candidates
        .into_iter()
        .zip(records)
        .filter_map(|((mechanism, key), record)| {
            record.map(|record| Found {
                key,
                record,
                mechanism: Some(mechanism),
            })
        })
        .collect();
    match found.len() {
        0 => Err(Failure::NotFound(format!(
            "no record for key {raw:?} in namespace {}{} (released, expired, deleted, or \
             another namespace or principal)",
            scope.namespace(),
            scope
                .principal()
                .map(|principal| format!(", principal {principal:?}"))
                .unwrap_or_default()
        ))),
        1 => Ok(found.remove(0)),
        _ => Err(Failure::Ambiguous(format!(
            "key {raw:?} has records of several front ends: {}; name one with --key-hash ID",
            found
                .iter()
                .map(|found| format!(
                    "{} (id {})",
                    found.mechanism.map_or("?", mechanism_name),
                    found.key
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// An id as `--key-hash` takes it: 8 to 64 hex characters (a whole storage key, or a prefix
/// of one), in lowercase; a usage failure (exit 2) otherwise.
pub(crate) fn id(text: &str) -> Result<String, Failure> {
    let hex = text.trim().to_ascii_lowercase();
    if (MIN_ID_PREFIX..=64).contains(&hex.len()) && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(hex)
    } else {
        Err(Failure::Usage(format!(
            "--key-hash {text:?}: a record's id as listed, 64 hex characters or a prefix of at \
             least {MIN_ID_PREFIX}"
        )))
    }
}

/// The record of id `hex` (whole, or a prefix): `None` if there is none; a prefix that fits
/// several records is an ambiguous failure (exit 6) naming their ids.
pub(crate) async fn by_id(admin: &Admin, hex: &str) -> Result<Option<Record>, Failure> {
    if let Some(key) = StorageKey::from_hex(hex) {
        return Ok(admin.inspect(&key).await?);
    }
    let mut found = admin.store().by_key_prefix(hex, 3).await?;
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(Failure::Ambiguous(format!(
            "id {hex} fits several records: {}{}; give more of the id",
            found
                .iter()
                .take(2)
                .map(|record| record.key.to_hex())
                .collect::<Vec<_>>()
                .join(", "),
            if found.len() > 2 { ", …" } else { "" }
        ))),
    }
}
