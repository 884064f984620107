//! The result type of an idempotent function.

/// The `Result<T, E>` an `#[idempotent]` function returns (also through aliases such as
/// `anyhow::Result<T>`).
pub trait FnResult: Sized {
    /// `T`.
    type Ok;
    /// `E`.
    type Err;
    /// Into a plain `Result`.
    fn into_result(self) -> Result<Self::Ok, Self::Err>;
    /// From a plain `Result`.
    fn from_result(result: Result<Self::Ok, Self::Err>) -> Self;
}

impl<T, E> FnResult for Result<T, E> {
    type Ok = T;
    type Err = E;
    fn into_result(self) -> Self {
        self
    }
    fn from_result(result: Self) -> Self {
        result
    }
}
