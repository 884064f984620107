//! The JSON fields a layer reads from a body (its key, its fingerprint's fields), found in one
//! pass over the body, without building the whole document.
//!
//! The body is read by `serde_json` exactly as `serde_json::from_slice::<Value>` reads it (the
//! same deserializer, every value visited with `deserialize_any`, every key with
//! `deserialize_str`), so the same bodies are accepted and refused, with the same error; but
//! only the values at the layer's JSON Pointers are built, as `Value`s, and the rest is checked
//! and dropped. A field is what `Value::pointer` finds in the whole document: for a key given
//! twice, the last one. Where `serde_json` would read an object specially (a first key that is
//! one of its private tokens), the whole document is parsed as before.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use bytes::Bytes;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// First keys that make `serde_json` read an object as something else (`raw_value`,
/// `arbitrary_precision`): bodies holding one are parsed whole.
const PRIVATE_TOKENS: [&str; 2] = [
    "$serde_json::private::RawValue",
    "$serde_json::private::Number",
];

/// The JSON Pointers a layer reads, as a tree of their reference tokens.
#[derive(Debug, Default)]
pub(crate) struct JsonPlan {
    pointers: Vec<Pointer>,
    root: Node,
}

#[derive(Debug)]
struct Pointer {
    text: String,
    /// The unescaped reference tokens; `None` for text that is not a JSON Pointer (it matches
    /// nothing, as `Value::pointer` finds nothing for it).
    tokens: Option<Vec<String>>,
}

#[derive(Debug, Default)]
struct Node {
    /// Pointers that end here.
    ends: Vec<usize>,
    /// Every pointer at or below this node (cleared when its key is given again).
    below: Vec<usize>,
    children: Vec<Child>,
}

#[derive(Debug)]
struct Child {
    token: String,
    /// The array index the token names, as `Value::pointer` reads indices (no sign, no
    /// leading zero).
    index: Option<usize>,
    node: Node,
}

impl Node {
    fn by_key(&self, key: &str) -> Option<&Node> {
        self.children
            .iter()
            .find(|child| child.token == key)
            .map(|child| &child.node)
    }

    fn by_index(&self, index: usize) -> Option<&Node> {
        self.children
            .iter()
            .find(|child| child.index == Some(index))
            .map(|child| &child.node)
    }
}

/// `Value::pointer`'s reading of an array index.
fn parse_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// `Value::pointer` with the tokens already split and unescaped.
fn lookup<'v>(value: &'v Value, tokens: &[String]) -> Option<&'v Value> {
    tokens.iter().try_fold(value, |target, token| match target {
        Value::Object(map) => map.get(token.as_str()),
        Value::Array(list) => parse_index(token).and_then(|index| list.get(index)),
        _ => None,
    })
}

impl JsonPlan {
    /// The plan for these pointers (duplicates are read once).
    pub(crate) fn new<'a>(pointers: impl IntoIterator<Item = &'a str>) -> Self {
        let mut plan = Self::default();
        for text in pointers {
            if plan.pointers.iter().any(|p| p.text == text) {
                continue;
            }
            let id = plan.pointers.len();
            // Split and unescaped as `Value::pointer` does.
            let tokens = match text {
                "" => Some(Vec::new()),
                _ if text.starts_with('/') => Some(
                    text.split('/')
                        .skip(1)
                        .map(|token| token.replace("~1", "/").replace("~0", "~"))
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            };
            if let Some(tokens) = &tokens {
                let mut node = &mut plan.root;
                node.below.push(id);
                for token in tokens {
                    let at = match node.children.iter().position(|c| c.token == *token) {
                        Some(at) => at,
                        None => {
                            node.children.push(Child {
                                token: token.clone(),
                                index: parse_index(token),
                                node: Node::default(),
                            });
                            node.children.len() - 1
                        }
                    };
                    node = &mut node.children[at].node;
                    node.below.push(id);
                }
                node.ends.push(id);
            }
            plan.pointers.push(Pointer {
                text: text.to_owned(),
                tokens,
            });
        }
        plan
    }

    fn index_of(&self, pointer: &str) -> Option<usize> {
        self.pointers.iter().position(|p| p.text == pointer)
    }

    /// The value at each pointer (in the plan's order), or why the body is not JSON.
    pub(crate) fn extract(&self, body: &[u8]) -> Result<Vec<Option<Value>>, String> {
        let mut found = vec![None; self.pointers.len()];
        let whole = Cell::new(false);
        let walked = {
            let mut deserializer = serde_json::Deserializer::from_slice(body);
            Walk {
                plan: self,
                node: &self.root,
                depth: 0,
                found: &mut found,
                whole: &whole,
            }
            .deserialize(&mut deserializer)
            .and_then(|()| deserializer.end())
        };
        match walked {
            Ok(()) => Ok(found),
            Err(_) if whole.get() => {
                let value: Value = serde_json::from_slice(body).map_err(not_json)?;
                Ok(self
                    .pointers
                    .iter()
                    .map(|p| p.tokens.as_ref().and_then(|t| lookup(&value, t)).cloned())
                    .collect())
            }
            Err(error) => Err(not_json(error)),
        }
    }
}

fn not_json(error: serde_json::Error) -> String {
    format!("the body is not valid JSON: {error}")
}

/// Reads a value at `node` of the plan: builds it where a pointer ends, walks on towards the
/// pointers below, checks and drops the rest.
struct Walk<'p, 'f> {
    plan: &'p JsonPlan,
    node: &'p Node,
    depth: usize,
    found: &'f mut [Option<Value>],
    whole: &'f Cell<bool>,
}

impl<'p> Walk<'p, '_> {
    /// The walk of `node`, a value one level below this one, with what its pointers found
    /// cleared: a key given again replaces what its first value held.
    fn below(&mut self, node: &'p Node) -> Walk<'p, '_> {
        let walk = Walk {
            plan: self.plan,
            node,
            depth: self.depth + 1,
            found: &mut *self.found,
            whole: self.whole,
        };
        for &id in &node.below {
            walk.found[id] = None;
        }
        walk
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        if self.node.ends.is_empty() {
            return deserializer.deserialize_any(self);
        }
        // A pointer ends here: build the value, and find the pointers below in it.
        let value = <Value as de::Deserialize>::deserialize(deserializer)?;
        if let [id] = self.node.below[..] {
            // Only this one: the value itself, not a copy.
            self.found[id] = Some(value);
            return Ok(());
        }
        for &id in &self.node.below {
            let tokens = self.plan.pointers[id].tokens.as_deref().unwrap_or_default();
            self.found[id] = lookup(&value, &tokens[self.depth..]).cloned();
        }
        Ok(())
    }
}

/// The methods a walking visitor shares: it builds nothing (`Value = ()`), expects any JSON
/// value, and accepts and drops a scalar, which holds no pointer below it.
macro_rules! scalars_are_leaves {
    () => {
        type Value = ();

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("any valid JSON value")
        }

        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_none<E>(self) -> Result<(), E> {
            Ok(())
        }
    };
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    scalars_are_leaves!();

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            let more = match self.node.by_index(index) {
                Some(node) => seq.next_element_seed(self.below(node))?.is_some(),
                None => seq.next_element_seed(Skip { whole: self.whole })?.is_some(),
            };
            if !more {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut first = true;
        while let Some(key) = next_key(&mut map, &mut first, self.whole)? {
            match self.node.by_key(&key) {
                Some(node) => map.next_value_seed(self.below(node))?,
                None => map.next_value_seed(Skip { whole: self.whole })?,
            }
        }
        Ok(())
    }
}

/// The next key of an object a walk reads. An object whose first key is one of serde_json's
/// private tokens is not an object of the body's but a value serde_json carries its own way:
/// the walk ends there (an error) and `whole` tells to parse the body whole instead.
fn next_key<'de, A: MapAccess<'de>>(
    map: &mut A,
    first: &mut bool,
    whole: &Cell<bool>,
) -> Result<Option<Cow<'de, str>>, A::Error> {
    let key = map.next_key_seed(KeySeed)?;
    if let Some(key) = &key
        && std::mem::take(first)
        && PRIVATE_TOKENS.contains(&key.as_ref())
    {
        whole.set(true);
        return Err(de::Error::custom("parsed whole"));
    }
    Ok(key)
}

/// An object key, borrowed from the body where it holds no escape.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a string key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }
}

/// Checks a value and drops it.
#[derive(Clone, Copy)]
struct Skip<'f> {
    whole: &'f Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for Skip<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip<'_> {
    scalars_are_leaves!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut first = true;
        while next_key(&mut map, &mut first, self.whole)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
}

/// A body's JSON fields, read at most once, when first needed.
pub(crate) struct LazyJson<'a> {
    plan: &'a JsonPlan,
    bytes: &'a Bytes,
    found: Option<Result<Vec<Option<Value>>, String>>,
    /// For a pointer outside the plan (not expected): the whole document.
    whole: Option<Result<Value, String>>,
}

impl<'a> LazyJson<'a> {
    pub(crate) fn new(plan: &'a JsonPlan, bytes: &'a Bytes) -> Self {
        Self {
            plan,
            bytes,
            found: None,
            whole: None,
        }
    }

    /// The value at `pointer` (`None`: absent), as `Value::pointer` finds it in the parsed
    /// body, or why the body is not JSON.
    pub(crate) fn field(&mut self, pointer: &str) -> Result<Option<&Value>, String> {
        let Some(id) = self.plan.index_of(pointer) else {
            let bytes = self.bytes;
            let whole = self
                .whole
                .get_or_insert_with(|| serde_json::from_slice(bytes).map_err(not_json));
            return match whole {
                Ok(value) => Ok(value.pointer(pointer)),
                Err(error) => Err(error.clone()),
            };
        };
        let (plan, bytes) = (self.plan, self.bytes);
        match self.found.get_or_insert_with(|| plan.extract(bytes)) {
            Ok(found) => Ok(found[id].as_ref()),
            Err(error) => Err(error.clone()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // Every document's pointers, with whole-document ones (""), terminal ones with pointers
    // below them ("/a" and "/a/b"), and paths whose inner nodes are no pointer ("/x/y/z").
    const POINTERS: [&str; 18] = [
        "", "/", "/a", "/a/b", "/a/0", "/a/0/b", "/b", "/0", "/01", "/-", "/a~1b", "/a~0b", "/~01",
        "a", "/c/d/e", "/a/b/c", "/x/y/z", "/x/1",
    ];

    /// [`POINTERS`] without those that read the whole document or a whole top-level member, so
    /// that most of a document is walked and skipped rather than built.
    const INNER_POINTERS: [&str; 4] = ["/c/d/e", "/x/y/z", "/x/1", "/x/y/1"];

    fn expected(body: &[u8], pointers: &[&str]) -> Result<Vec<Option<Value>>, String> {
        let value: Value = serde_json::from_slice(body).map_err(not_json)?;
        Ok(pointers.iter().map(|p| value.pointer(p).cloned()).collect())
    }

    fn check_bytes(body: &[u8]) -> Result<(), TestCaseError> {
        for pointers in [&POINTERS[..], &INNER_POINTERS[..]] {
            let plan = JsonPlan::new(pointers.iter().copied());
            prop_assert_eq!(
                plan.extract(body),
                expected(body, pointers),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        Ok(())
    }

    fn check(body: &str) {
        check_bytes(body.as_bytes()).unwrap();
    }

    #[test]
    fn reads_what_value_pointer_reads() {
        for body in [
            r#"{"a":{"b":1,"0":2},"b":[1,2],"0":"zero","01":1,"-":2,"a/b":3,"a~b":4,"~1":5}"#,
            r#"{"a":[{"b":"x"},2],"c":{"d":{"e":null}}}"#,
            r#"{"a":{"b":{"c":[1,2]}},"a":{"b":2}}"#,
            r#"{"a":{"b":1},"a":5}"#,
            r#"{"a":5,"a":{"b":1}}"#,
            r#"{"a":"\u00e9\n","b":1.5e300,"c":-0,"0":18446744073709551615}"#,
            r#"[1,{"a":2}]"#,
            r#""text""#,
            "12",
            "null",
            r#"{"$serde_json::private::RawValue":"{\"a\":1}"}"#,
            r#"{"a":{"$serde_json::private::RawValue":"[1]"}}"#,
            r#"{"a":{"x":1,"$serde_json::private::RawValue":2}}"#,
            // A key given twice replaces what its first value held, below it too.
            r#"{"x":{"y":{"z":1},"1":2},"x":3}"#,
            r#"{"x":{"y":{"z":1}},"x":{"y":[0,1]}}"#,
            r#"{"x":{"y":{"z":1}},"x":{"1":"one"}}"#,
            r#"{"c":{"d":{"e":[1]}},"c":{"d":{"e":null}}}"#,
            r#"{"x":[{"y":1},{"z":2}],"x":{"y":{"z":"s"}}}"#,
            // `serde_json`'s private tokens as a first key, where the walk skips.
            r#"{"q":{"$serde_json::private::RawValue":"not json"},"x":{"y":{"z":1}}}"#,
            r#"{"q":{"$serde_json::private::RawValue":5},"c":1}"#,
            r#"{"q":[{"$serde_json::private::RawValue":"[1]"}],"x":{"1":2}}"#,
            r#"{"x":{"$serde_json::private::RawValue":"{\"y\":{\"z\":7}}"}}"#,
            r#"{"x":{"$serde_json::private::Number":"12"}}"#,
        ] {
            check(body);
        }
    }

    #[test]
    fn refuses_what_value_refuses_with_the_same_error() {
        for body in [
            "",
            "{",
            r#"{"a":1"#,
            r#"{"a":1,}"#,
            r#"{"a":1} x"#,
            r#"{"a":"\ud800"}"#,
            r#"{"x":"\ud800","a":1}"#,
            r#"{"x":1e999,"a":1}"#,
            "{\"x\":\"\u{1}\"}",
            r#"{"x":tru}"#,
            r#"{"a":[1,2,]}"#,
            r#"{'a':1}"#,
        ] {
            check(body);
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        check(&format!(r#"{{"x":{deep},"a":1}}"#));
        check(&format!(r#"{{"a":{deep}}}"#));
        check_bytes(b"{\"x\":\"\xff\",\"a\":1}").unwrap();
        check_bytes(b"{\"\xff\":1,\"a\":1}").unwrap();
    }

    /// Arbitrary JSON documents: nested objects and arrays, escapes, non-ASCII, floats.
    pub(crate) fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z0-9~/\\\\\"\u{e9}\u{1f600} ]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(
                    (
                        prop_oneof![
                            "[ab0-2~/-]{0,3}",
                            Just("a".to_owned()),
                            prop::sample::select(vec!["c", "d", "e", "x", "y", "z", "1"])
                                .prop_map(str::to_owned),
                        ],
                        inner
                    ),
                    0..5
                )
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_document_reads_as_value_pointer_reads_it(value in json(), pretty in any::<bool>()) {
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            check_bytes(text.as_bytes())?;
        }

        #[test]
        fn any_bytes_are_accepted_or_refused_as_value_does(
            value in json(),
            cut in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            at in any::<prop::sample::Index>(),
            duplicate in any::<bool>(),
        ) {
            let mut text = serde_json::to_string(&value).unwrap().into_bytes();
            if duplicate && text.first() == Some(&b'{') && text.len() > 2 {
                // The same object's members twice: `{…, …}` with keys repeated.
                let inner = text[1..text.len() - 1].to_vec();
                if !inner.is_empty() {
                    text = [b"{".as_slice(), &inner, b",", &inner, b"}"].concat();
                }
            }
            check_bytes(&text)?;
            let mut mutated = text.clone();
            if !mutated.is_empty() {
                let i = at.index(mutated.len());
                mutated[i] = byte;
            }
            check_bytes(&mutated)?;
            check_bytes(&text[..cut.index(text.len() + 1)])?;
        }
    }
}
