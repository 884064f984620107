//! Mechanisms: which kind of front end a record belongs to, and the tag its keys hash under.

/// Which kind of front end a record belongs to.
///
/// The mechanism is part of the stored key, so records written by different mechanisms never
/// answer for each other, even in one namespace of one table: an HTTP response is never replayed
/// to a function, nor a function's value to a consumer, nor a layer's claim mistaken for a
/// transaction's. Each record says which mechanism wrote it ([`Record::mechanism`](crate::Record::mechanism)).
///
/// How a key becomes a storage key is versioned (the key derivation, which each record names:
/// [`Record::key_derivation`](crate::Record::key_derivation)):
///
/// | version | keys |
/// |---|---|
/// | 1 | every mechanism keyed as a request, as release 0.1 did |
/// | 2 | functions and transactions keyed by their mechanism; consumers as requests in their fast tier, as transactions in their SQL truth |
/// | 3 | consumers keyed as messages in both tiers |
///
/// After an upgrade that changed a derivation, nodes with previous keys read
/// ([`Idempotency::with_previous_keys`](crate::Idempotency::with_previous_keys), the SQL
/// stores' `with_previous_keys`) claim the previous derivation's key first and then their own,
/// for one TTL: a retry in flight during the rolling deploy, or a record the previous release
/// completed, is then never run a second time. Only the previous derivation is read: upgrade
/// one release at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mechanism {
    /// HTTP and gRPC requests (the layer and transactional HTTP) and direct engine calls
    /// ([`Scope::new`](crate::Scope::new)).
    Request,
    /// `#[idempotent]` functions and `Call`s (crate `idempotency-function`), transactional ones
    /// included.
    Function,
    /// Claims taken by hand in a transaction (`idempotency_sql::TxStore::claim_in_tx`).
    Transaction,
    /// Queue consumers' records, in both tiers (the fast tier's, through
    /// [`Idempotency::claim`](crate::Idempotency::claim), and the SQL truth's, through
    /// `idempotency_sql::TxStore::claim_key_in_tx`): one message has one storage key in
    /// both, so the two records of a message are found, and joined, by it. Key derivation 2
    /// keyed consumers as requests in their fast tier and as transactions in their truth:
    /// read with previous keys on ([`Idempotency::with_previous_keys`](crate::Idempotency::with_previous_keys)
    /// on the fast tier's engine, `with_previous_keys` on the truth's SQL store) for one TTL
    /// after the upgrade, so that a redelivery during the rolling deploy is still a duplicate.
    Message,
}

impl Mechanism {
    /// Every mechanism.
    pub const ALL: [Self; 4] = [
        Self::Request,
        Self::Function,
        Self::Transaction,
        Self::Message,
    ];

    /// `"request"`, `"function"`, `"transaction"` or `"message"`: its name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Function => "function",
            Self::Transaction => "transaction",
            Self::Message => "message",
        }
    }

    /// Parses [`Mechanism::as_str`]'s output.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|mechanism| mechanism.as_str() == text)
    }

    /// The domain tag hashed in front of the key: short, so that a short namespace and a UUID
    /// key hash in one BLAKE3 block (64 bytes with their length bytes). `Request` keeps the
    /// tag records had before mechanisms were told apart.
    pub(crate) fn tag(self) -> &'static [u8] {
        match self {
            Self::Request => b"record",
            Self::Function => b"function",
            Self::Transaction => b"transaction",
            Self::Message => b"message",
        }
    }
}
