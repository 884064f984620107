//! Conditional state transitions on the application's own table: the state machine as an
//! idempotency mechanism, no extra table needed.

use std::fmt;

use idempotency_core::StoreError;

use super::common::validate_identifier;

/// A value of a state column: text (`"PAID"`, for `TEXT`/`VARCHAR`/`ENUM` columns) or an
/// integer code (`20`, for `SMALLINT`/`INT`/`TINYINT` columns). One transition uses one kind.
///
/// ```
/// use idempotency_sql::StateValue;
/// assert_eq!(StateValue::from("PAID").to_string(), "PAID");
/// assert_eq!(StateValue::from(20).to_string(), "20");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StateValue {
    /// A text state.
    Text(String),
    /// An integer state code.
    Code(i64),
}

impl fmt::Display for StateValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(text) => f.write_str(text),
            Self::Code(code) => write!(f, "{code}"),
        }
    }
}

impl From<&str> for StateValue {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl From<String> for StateValue {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

macro_rules! state_codes {
    ($($int:ty),*) => {$(
        impl From<$int> for StateValue {
            fn from(code: $int) -> Self {
                Self::Code(i64::from(code))
            }
        }
    )*};
}
state_codes!(i8, i16, i32, i64, u8, u16, u32);

/// What [`Transition`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransitionOutcome {
    /// The row was in a `from` state and is now in the target state: run the side effects.
    Applied,
    /// The row already was in the target state: an idempotent repeat, answer success and run
    /// no side effect again.
    AlreadyInTarget,
    /// The row is in another state: an illegal transition, to be reported (not a duplicate).
    Illegal {
        /// The state the row is in, as text (an integer code in decimal).
        current: String,
    },
    /// No row has this id.
    NotFound,
}

impl TransitionOutcome {
    /// Only [`TransitionOutcome::Applied`] may run side effects.
    pub fn is_applied(&self) -> bool {
        matches!(self, Self::Applied)
    }

    /// Applied or already in target: what a caller (a payment gateway) should be told is a
    /// success.
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Applied | Self::AlreadyInTarget)
    }

    fn classify(applied: bool, current: Option<String>, target: &StateValue) -> Self {
        match (applied, current) {
            (true, _) => Self::Applied,
            (false, None) => Self::NotFound,
            (false, Some(current)) if current == target.to_string() => Self::AlreadyInTarget,
            (false, Some(current)) => Self::Illegal { current },
        }
    }
}

/// A conditional transition `from → to` of a state column, keyed by an id column:
/// `UPDATE table SET state = to WHERE id = ? AND state IN (from…)`, and when no row changed,
/// the current state to tell a repeat from an illegal transition.
///
/// Concurrent callers are serialized by the row lock: exactly one sees
/// [`TransitionOutcome::Applied`], the others [`TransitionOutcome::AlreadyInTarget`]. Run the
/// transition inside the transaction that also writes the side effects (or gate them on
/// `Applied`), so a repeated callback never grants twice.
///
/// States are text (`TEXT`, `VARCHAR`, `CHAR`, MySQL `ENUM`) or integer codes (`SMALLINT`,
/// `INT`, `TINYINT`, …), see [`StateValue`]; one transition uses one kind.
/// [`also_set`](Self::also_set) columns hold text.
/// Table and column names are validated identifiers ([`StoreError::Config`] otherwise).
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use idempotency_sql::{Transition, TransitionOutcome};
///
/// let mark_paid = Transition::new("orders", "id", "status")?.from("WAIT_PAY").to("PAID");
/// let mut tx = pool.begin().await?;
/// match mark_paid.apply_postgres(&mut *tx, 42_i64).await? {
///     TransitionOutcome::Applied => {
///         sqlx::query("INSERT INTO coupons (order_id) VALUES (42)").execute(&mut *tx).await?;
///     }
///     TransitionOutcome::AlreadyInTarget => {} // repeated callback: success, nothing to do
///     TransitionOutcome::Illegal { current } => eprintln!("order is {current}: alert"),
///     TransitionOutcome::NotFound => eprintln!("unknown order"),
/// }
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    table: String,
    id_column: String,
    state_column: String,
    from: Vec<StateValue>,
    to: Option<StateValue>,
    also_set: Vec<(String, String)>,
}

impl Transition {
    /// A transition on `table`, rows found by `id_column`, state held in `state_column`.
    pub fn new(table: &str, id_column: &str, state_column: &str) -> Result<Self, StoreError> {
        for name in [table, id_column, state_column] {
            validate_identifier(name)?;
        }
        Ok(Self {
            table: table.to_owned(),
            id_column: id_column.to_owned(),
            state_column: state_column.to_owned(),
            from: Vec::new(),
            to: None,
            also_set: Vec::new(),
        })
    }

    /// Adds a state the transition may start from (call again for several): `"WAIT_PAY"`, or
    /// an integer code such as `10`.
    pub fn from(mut self, state: impl Into<StateValue>) -> Self {
        self.from.push(state.into());
        self
    }

    /// The target state.
    pub fn to(mut self, state: impl Into<StateValue>) -> Self {
        self.to = Some(state.into());
        self
    }

    /// Also sets a text `column` to `value` when the transition applies (the post-mortem's
    /// `SET status = 'PAID', trade_no = ?`). The column name is validated when applied.
    pub fn also_set(mut self, column: &str, value: impl Into<String>) -> Self {
        self.also_set.push((column.to_owned(), value.into()));
        self
    }

    /// The states the transition may start from.
    pub fn sources(&self) -> &[StateValue] {
        &self.from
    }

    /// The target state, if set.
    pub fn target(&self) -> Option<&StateValue> {
        self.to.as_ref()
    }

    /// Whether the states are integer codes.
    fn coded(&self) -> bool {
        matches!(self.to, Some(StateValue::Code(_)))
    }

    fn checked_target(&self) -> Result<&StateValue, StoreError> {
        for (column, _) in &self.also_set {
            validate_identifier(column)?;
        }
        if self.from.is_empty() {
            return Err(StoreError::Config(
                "a transition needs at least one `from` state".to_owned(),
            ));
        }
        let target = self
            .to
            .as_ref()
            .ok_or_else(|| StoreError::Config("a transition needs a `to` state".to_owned()))?;
        let coded = self.coded();
        if self
            .from
            .iter()
            .any(|state| matches!(state, StateValue::Code(_)) != coded)
        {
            return Err(StoreError::Config(
                "a transition's states are all text or all integer codes, not both".to_owned(),
            ));
        }
        Ok(target)
    }

    /// The integer codes of the `from` states (empty for text states).
    #[cfg(feature = "postgres")]
    fn source_codes(&self) -> Vec<i64> {
        self.from
            .iter()
            .filter_map(|state| match state {
                StateValue::Code(code) => Some(*code),
                StateValue::Text(_) => None,
            })
            .collect()
    }

    /// The text of the `from` states (empty for integer codes).
    #[cfg(feature = "postgres")]
    fn source_texts(&self) -> Vec<&str> {
        self.from
            .iter()
            .filter_map(|state| match state {
                StateValue::Text(text) => Some(text.as_str()),
                StateValue::Code(_) => None,
            })
            .collect()
    }

    /// `UPDATE … WHERE id = ? AND state IN (?, …)` with `?` placeholders (MySQL, SQLite).
    #[cfg(any(feature = "mysql", feature = "sqlite"))]
    fn update_with_markers(&self, quote: char) -> String {
        let q = |name: &str| format!("{quote}{name}{quote}");
        let markers = vec!["?"; self.from.len()].join(", ");
        let extra: String = self
            .also_set
            .iter()
            .map(|(column, _)| format!(", {} = ?", q(column)))
            .collect();
        format!(
            "UPDATE {} SET {} = ?{extra} WHERE {} = ? AND {} IN ({markers})",
            q(&self.table),
            q(&self.state_column),
            q(&self.id_column),
            q(&self.state_column)
        )
    }

    /// Applies the transition on PostgreSQL in **one round trip** (the update and, when it
    /// changed nothing, a locking read of the latest row version, in one statement). `executor`
    /// is a pool, a connection or `&mut *tx`.
    #[cfg(feature = "postgres")]
    pub async fn apply_postgres<'e, E, I>(
        &self,
        executor: E,
        id: I,
    ) -> Result<TransitionOutcome, StoreError>
    where
        E: sqlx::Executor<'e, Database = sqlx::Postgres>,
        I: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send,
    {
        let target = self.checked_target()?;
        let (t, id_col, state) = (&self.table, &self.id_column, &self.state_column);
        // The locking read follows a row updated by a concurrent transaction that committed
        // after this statement's snapshot to its latest version (READ COMMITTED), so a repeat
        // that waited on the first caller's lock reads the new state, not the old one.
        let extra: String = self
            .also_set
            .iter()
            .enumerate()
            .map(|(index, (column, _))| format!(", \"{column}\" = ${}", index + 4))
            .collect();
        // Text states compare as text (an ENUM or VARCHAR column alike); codes as integers.
        let matches = if self.coded() {
            format!("\"{state}\" = ANY($3)")
        } else {
            format!("\"{state}\"::text = ANY($3)")
        };
        let sql = format!(
            "WITH upd AS (UPDATE \"{t}\" SET \"{state}\" = $2{extra} \
               WHERE \"{id_col}\" = $1 AND {matches} RETURNING 1), \
             cur AS (SELECT \"{state}\"::text AS state FROM \"{t}\" \
               WHERE \"{id_col}\" = $1 AND NOT EXISTS (SELECT 1 FROM upd) FOR UPDATE) \
             SELECT true AS applied, NULL::text AS state FROM upd \
             UNION ALL SELECT false, state FROM cur"
        );
        let query = sqlx::query_as(&sql).bind(id);
        let mut query = match target {
            StateValue::Text(text) => query.bind(text.as_str()).bind(self.source_texts()),
            StateValue::Code(code) => query.bind(*code).bind(self.source_codes()),
        };
        for (_, value) in &self.also_set {
            query = query.bind(value.as_str());
        }
        let row: Option<(bool, Option<String>)> = query
            .fetch_optional(executor)
            .await
            .map_err(super::common::map_err)?;
        Ok(match row {
            None => TransitionOutcome::NotFound,
            Some((applied, current)) => TransitionOutcome::classify(applied, current, target),
        })
    }

    /// Applies the transition on MySQL/MariaDB: the update, and when it changed nothing, a
    /// locking read (`FOR UPDATE`, the latest committed version even in `REPEATABLE READ`).
    /// `conn` is a connection or `&mut *tx`.
    #[cfg(feature = "mysql")]
    pub async fn apply_mysql<I>(
        &self,
        conn: &mut sqlx::MySqlConnection,
        id: I,
    ) -> Result<TransitionOutcome, StoreError>
    where
        I: for<'q> sqlx::Encode<'q, sqlx::MySql> + sqlx::Type<sqlx::MySql> + Send + Clone,
    {
        self.apply_in_two_statements::<sqlx::MySql, I>(conn, id)
            .await
    }

    /// Applies the transition on SQLite: the update, and when it changed nothing, a read in the
    /// same (write) transaction. `conn` is a connection or `&mut *tx`.
    #[cfg(feature = "sqlite")]
    pub async fn apply_sqlite<I>(
        &self,
        conn: &mut sqlx::SqliteConnection,
        id: I,
    ) -> Result<TransitionOutcome, StoreError>
    where
        I: for<'q> sqlx::Encode<'q, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite> + Send + Clone,
    {
        self.apply_in_two_statements::<sqlx::Sqlite, I>(conn, id)
            .await
    }

    /// The update, and when it changed nothing, a read of the current state (locking where the
    /// database reads a snapshot otherwise): MySQL/MariaDB and SQLite, which differ only by
    /// their [`TwoStatements`] dialect.
    #[cfg(any(feature = "mysql", feature = "sqlite"))]
    async fn apply_in_two_statements<DB, I>(
        &self,
        conn: &mut DB::Connection,
        id: I,
    ) -> Result<TransitionOutcome, StoreError>
    where
        DB: TwoStatements,
        for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
        for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        (String,): for<'r> sqlx::FromRow<'r, DB::Row>,
        DB::QueryResult: super::common::RowsAffected,
        I: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + Send + Clone,
    {
        use super::common::RowsAffected;
        let target = self.checked_target()?;
        let update = self.update_with_markers(DB::QUOTE);
        let mut query = bind_state(sqlx::query(&update), target);
        for (_, value) in &self.also_set {
            query = query.bind(value.as_str());
        }
        let mut query = query.bind(id.clone());
        for from in &self.from {
            query = bind_state(query, from);
        }
        // MySQL connections report matched rows (CLIENT_FOUND_ROWS), so from == to counts too.
        let done = query
            .execute(&mut *conn)
            .await
            .map_err(super::common::map_err)?;
        if done.rows() > 0 {
            return Ok(TransitionOutcome::Applied);
        }
        let q = DB::QUOTE;
        let select = format!(
            "SELECT CAST({q}{}{q} AS {}) FROM {q}{}{q} WHERE {q}{}{q} = ?{}",
            self.state_column,
            DB::TEXT,
            self.table,
            self.id_column,
            DB::LOCKING_READ
        );
        let current: Option<(String,)> = sqlx::query_as(&select)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(super::common::map_err)?;
        Ok(TransitionOutcome::classify(
            false,
            current.map(|(state,)| state),
            target,
        ))
    }
}

/// What the two-statement transition (MySQL/MariaDB, SQLite) writes differently per database.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
trait TwoStatements: sqlx::Database {
    /// The identifier quote.
    const QUOTE: char;
    /// The text type a state is cast to.
    const TEXT: &'static str;
    /// What makes the read of the current state see (and lock) the latest committed row.
    const LOCKING_READ: &'static str;
}

#[cfg(feature = "mysql")]
impl TwoStatements for sqlx::MySql {
    const QUOTE: char = '`';
    const TEXT: &'static str = "CHAR";
    const LOCKING_READ: &'static str = " FOR UPDATE";
}

#[cfg(feature = "sqlite")]
impl TwoStatements for sqlx::Sqlite {
    const QUOTE: char = '"';
    const TEXT: &'static str = "TEXT";
    // The transaction holds the write lock already (`BEGIN IMMEDIATE`).
    const LOCKING_READ: &'static str = "";
}

/// Binds a state as text or as an integer (MySQL, SQLite).
#[cfg(any(feature = "mysql", feature = "sqlite"))]
fn bind_state<'q, DB>(
    query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>,
    state: &'q StateValue,
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    match state {
        StateValue::Text(text) => query.bind(text.as_str()),
        StateValue::Code(code) => query.bind(*code),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(Transition::new("orders", "id", "status").is_ok());
        for (t, i, s) in [
            ("orders; drop table x", "id", "status"),
            ("orders", "id\"", "status"),
            ("orders", "id", "sta tus"),
        ] {
            assert!(matches!(
                Transition::new(t, i, s),
                Err(StoreError::Config(_))
            ));
        }
    }

    #[test]
    fn outcomes() {
        let paid = StateValue::from("PAID");
        assert_eq!(
            TransitionOutcome::classify(false, Some("PAID".into()), &paid),
            TransitionOutcome::AlreadyInTarget
        );
        assert_eq!(
            TransitionOutcome::classify(false, Some("20".into()), &StateValue::from(20)),
            TransitionOutcome::AlreadyInTarget
        );
        assert_eq!(
            TransitionOutcome::classify(false, Some("CLOSED".into()), &paid),
            TransitionOutcome::Illegal {
                current: "CLOSED".into()
            }
        );
        assert_eq!(
            TransitionOutcome::classify(false, None, &paid),
            TransitionOutcome::NotFound
        );
        assert!(TransitionOutcome::classify(true, None, &paid).is_applied());
        let mixed = Transition::new("orders", "id", "status")
            .unwrap()
            .from("WAIT_PAY")
            .to(20);
        assert!(matches!(mixed.checked_target(), Err(StoreError::Config(_))));
        let incomplete = Transition::new("orders", "id", "status")
            .unwrap()
            .to("PAID");
        assert!(matches!(
            incomplete.checked_target(),
            Err(StoreError::Config(_))
        ));
    }
}
