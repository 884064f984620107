//! Where a request's token is: its header, or a form or JSON field of its body.

use http_body::Body;

use super::layer::TokenLayer;
use crate::body::RequestBody;
use crate::collect::{RequestCollectError, collect_request};
use crate::idempotency::config::DEFAULT_BODY_READ_TIMEOUT;
use crate::refusal::{Refusal, RefusalKind};

/// Where the token was found, or why not.
pub(super) enum Found<B> {
    Token(String, RequestBody<B>),
    Missing(RequestBody<B>),
    Refused(Refusal),
}

/// " or the `x` form field or the `/y` JSON field", for the refusal's detail.
pub(super) fn field_names<T>(layer: &TokenLayer<T>) -> String {
    let mut names = String::new();
    if let Some(field) = &layer.form_field {
        names.push_str(&format!(" or the `{field}` form field"));
    }
    if let Some(pointer) = &layer.json_field {
        names.push_str(&format!(" or the `{pointer}` JSON field"));
    }
    names
}

/// The header first; then, if configured and the content type matches, a body field (the body
/// is collected once and handed on as bytes).
pub(super) async fn find_token<T, B: Body>(
    layer: &TokenLayer<T>,
    parts: &http::request::Parts,
    body: B,
) -> Found<B> {
    let header = parts
        .headers
        .get(&layer.header)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| !value.is_empty());
    if let Some(token) = header {
        return Found::Token(token.to_owned(), RequestBody::streaming(body));
    }
    let content_type = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let form = layer
        .form_field
        .as_deref()
        .filter(|_| content_type.starts_with("application/x-www-form-urlencoded"));
    let json = layer.json_field.as_deref().filter(|_| {
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        essence == "application/json" || essence.ends_with("+json")
    });
    if form.is_none() && json.is_none() {
        return Found::Missing(RequestBody::streaming(body));
    }
    let read = collect_request(body, layer.max_body_bytes, DEFAULT_BODY_READ_TIMEOUT);
    let (data, trailers) = match read.await {
        Ok(collected) => collected,
        Err(RequestCollectError::TooLarge) => {
            let detail = format!(
                "the body is larger than the {} bytes read to find the token",
                layer.max_body_bytes
            );
            return Found::Refused(Refusal::new(RefusalKind::BodyTooLarge, detail));
        }
        Err(RequestCollectError::Stream) => {
            let detail = "the request body could not be read";
            return Found::Refused(Refusal::new(RefusalKind::MalformedBody, detail));
        }
        Err(RequestCollectError::TimedOut) => {
            let detail = "the request body did not arrive in time";
            return Found::Refused(Refusal::new(RefusalKind::BodyTimeout, detail));
        }
    };
    let token = match (form, json) {
        (Some(field), _) => form_value(&data, field),
        (None, Some(pointer)) => serde_json::from_slice::<serde_json::Value>(&data)
            .ok()
            .and_then(|value| {
                value
                    .pointer(pointer)
                    .and_then(|v| v.as_str().map(str::to_owned))
            }),
        (None, None) => None,
    };
    let body = RequestBody::buffered(data, trailers);
    match token.filter(|token| !token.is_empty()) {
        Some(token) => Found::Token(token, body),
        None => Found::Missing(body),
    }
}

/// The first value of `field` in an `application/x-www-form-urlencoded` body.
fn form_value(body: &[u8], field: &str) -> Option<String> {
    body.split(|&byte| byte == b'&').find_map(|pair| {
        let mut halves = pair.splitn(2, |&byte| byte == b'=');
        let name = percent_decode(halves.next()?)?;
        (name == field).then(|| percent_decode(halves.next().unwrap_or_default()))?
    })
}

/// Decodes `+` and `%XX` escapes; `None` for malformed escapes or non-UTF-8 text.
fn percent_decode(text: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.iter();
    while let Some(&byte) = bytes.next() {
        match byte {
            b'+' => out.push(b' '),
            b'%' => {
                let high = (*bytes.next()? as char).to_digit(16)?;
                let low = (*bytes.next()? as char).to_digit(16)?;
                out.push(u8::try_from(high * 16 + low).ok()?);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_form_fields() {
        let body = b"item=42&note=a+b%21&_token=abc-DEF_1";
        assert_eq!(form_value(body, "_token").as_deref(), Some("abc-DEF_1"));
        assert_eq!(form_value(body, "note").as_deref(), Some("a b!"));
        assert_eq!(form_value(body, "missing"), None);
        assert_eq!(form_value(b"_token=%zz", "_token"), None);
        assert_eq!(form_value(b"_token", "_token").as_deref(), Some(""));
    }
}
