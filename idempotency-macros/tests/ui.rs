//! Compile-time behaviour of `#[idempotent]`: what expands, and what is refused with which message.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
