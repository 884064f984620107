//! The admin API's reads: stuck records, a batch of records, counts, one record,
//! reconciliation. No raw key and no stored body is ever answered, but the body of one record
//! asked for by its key.

use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::{Query as QueryString, State};
use idempotency_operations::{Admin, Counts, Cursor, Query, Reconciliation, RecordView};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::ApiError;
use super::requests::{Filter, Target, candidates, mechanisms, scope};

/// The most records one listing answers.
const MAX_LIMIT: usize = 1000;

fn views(records: &[idempotency_core::Record]) -> Vec<RecordView> {
    let now = SystemTime::now();
    records
        .iter()
        .map(|record| RecordView::of(record, now))
        .collect()
}

/// `GET /stuck`: abandoned records, and with `older_than_ms` in-progress ones last written
/// longer ago.
pub(super) async fn stuck(
    State(admin): State<Admin>,
    QueryString(filter): QueryString<Filter>,
) -> Result<Json<Value>, ApiError> {
    let mut query = Query::stuck(filter.older_than_ms.map(Duration::from_millis));
    query.namespace = filter.namespace.clone();
    let limit = filter.limit.unwrap_or(100).min(MAX_LIMIT);
    let records = admin.list(&query, limit, &mut |_| {}).await?;
    Ok(Json(json!({ "records": views(&records) })))
}

/// `GET /records`: one batch of matching records from `cursor`.
pub(super) async fn records(
    State(admin): State<Admin>,
    QueryString(filter): QueryString<Filter>,
) -> Result<Json<Value>, ApiError> {
    let query = filter.query()?;
    let cursor = filter
        .cursor
        .clone()
        .map(Cursor::from_text)
        .unwrap_or_default();
    let page = admin.scan(&query, &cursor).await?;
    Ok(Json(json!({
        "records": views(&page.records),
        "examined": page.examined,
        "next_cursor": page.next.map(|next| next.to_string()),
    })))
}

/// `GET /stats`: counts per state.
pub(super) async fn stats(
    State(admin): State<Admin>,
    QueryString(filter): QueryString<Filter>,
) -> Result<Json<Counts>, ApiError> {
    Ok(Json(admin.count(&filter.query()?, &mut |_| {}).await?))
}

/// `POST /inspect`: one record by its key.
#[derive(Deserialize)]
pub(super) struct Inspect {
    #[serde(flatten)]
    target: Target,
    #[serde(default)]
    body: bool,
}

pub(super) async fn inspect(
    State(admin): State<Admin>,
    Json(request): Json<Inspect>,
) -> Result<Json<Value>, ApiError> {
    let key = request.target.storage_key(&admin).await?;
    let record = admin.inspect(&key).await?;
    let view = record.map(|record| {
        let view = RecordView::of(&record, SystemTime::now());
        if request.body {
            view.with_body(&record)
        } else {
            view
        }
    });
    Ok(Json(json!({ "record": view })))
}

/// `POST /reconcile`: each key's state, by index.
#[derive(Deserialize)]
pub(super) struct Reconcile {
    namespace: Option<String>,
    principal: Option<String>,
    mechanism: Option<String>,
    keys: Vec<String>,
}

/// One key's reconciliation line: no raw key, its index in the request.
#[derive(Serialize)]
struct Reconciled {
    index: usize,
    #[serde(flatten)]
    line: Reconciliation,
}

pub(super) async fn reconcile(
    State(admin): State<Admin>,
    Json(request): Json<Reconcile>,
) -> Result<Json<Value>, ApiError> {
    let scope = scope(request.namespace.as_deref(), request.principal.as_deref())?;
    let mechanisms = mechanisms(request.mechanism.as_deref())?;
    let now = SystemTime::now();
    let mut results = Vec::with_capacity(request.keys.len());
    for (index, key) in request.keys.iter().enumerate() {
        let found = candidates(&admin, &scope, &mechanisms, key).await?;
        let found = found
            .iter()
            .map(|(mechanism, key, record)| (mechanism.as_str(), *key, record.as_ref()));
        let lines = Reconciliation::of_key(found, now);
        results.extend(lines.into_iter().map(|line| Reconciled { index, line }));
    }
    Ok(Json(json!({ "results": results })))
}
