//! Which settings the user chose on the builder, so that a preset applied later keeps them.

/// A set of builder settings the user chose explicitly. Presets fill in only the settings not
/// in it, so `.namespace("x").grpc()` keeps `"x"` as `.grpc().namespace("x")` does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Explicit(u16);

/// One setting a preset may fill in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    Namespace,
    Key,
    Methods,
    Fingerprint,
    InFlight,
    Storage,
    Refusals,
    Conflicts,
}

impl Explicit {
    /// Records that the user chose `choice`.
    pub(crate) fn mark(&mut self, choice: Choice) {
        self.0 |= 1 << choice as u16;
    }

    /// Whether the user chose `choice`.
    pub(crate) fn has(self, choice: Choice) -> bool {
        self.0 & (1 << choice as u16) != 0
    }
}
