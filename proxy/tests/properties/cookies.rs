//! Cookie header reading.

use http::header::COOKIE;
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use proptest::sample::{Index, select};

use mcp_oauth_proxy::cookies;

use crate::generators::*;

const COOKIE_TARGETS: &[&str] = &[
    cookies::FLOW_COOKIE,
    cookies::SESSION_COOKIE,
    cookies::CSRF_COOKIE,
];

/// Names that differ from `target` by case, prefix or a character, plus the name itself.
/// (Percent-encoded spellings are left out: see bug_cookie_read_decodes_percent_encoded_names.)
fn cookie_name(target: &'static str) -> BoxedStrategy<String> {
    let bare = target.trim_start_matches("__Host-");
    prop_oneof![
        4 => Just(target.to_owned()),
        1 => Just(target.to_ascii_lowercase()),
        1 => Just(target.to_ascii_uppercase()),
        1 => Just(bare.to_owned()),
        1 => Just(format!("__Secure-{bare}")),
        1 => Just(format!("__host-{bare}")),
        1 => Just(format!("{target}x")),
        1 => Just(format!("x{target}")),
        1 => Just(format!("{target}-")),
        1 => Just(target[..target.len() - 1].to_owned()),
        1 => Just(format!(" {target}")),
        1 => edit().prop_map(move |e| apply(target, &e)).prop_filter("no %", |n| !n.contains('%')),
        1 => "[a-zA-Z_-]{1,8}",
    ]
    .boxed()
}

/// A cookie name to read, the `name=value` pairs sent, and where to split them into headers.
type CookieCase = (&'static str, Vec<(String, String)>, Vec<Index>);

fn cookie_header_case() -> BoxedStrategy<CookieCase> {
    select(COOKIE_TARGETS)
        .prop_flat_map(|t| {
            (
                Just(t),
                prop::collection::vec((cookie_name(t), "[A-Za-z0-9._=-]{0,12}"), 0..6),
                prop::collection::vec(any::<Index>(), 0..2),
            )
        })
        .boxed()
}

fn headers(values: &[String]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in values {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.append(COOKIE, v);
        }
    }
    h
}

proptest! {
    #![proptest_config(cases(CASES * 4))]

    #[test]
    fn cookie_read_never_panics(values in prop::collection::vec(junk(), 0..3), name in prop_oneof![junk(), select(COOKIE_TARGETS).prop_map(str::to_owned)]) {
        let mut h = HeaderMap::new();
        for v in &values {
            if let Ok(v) = HeaderValue::from_bytes(v.as_bytes()) {
                h.append(COOKIE, v);
            }
        }
        let _ = cookies::read(&h, &name);
        for t in COOKIE_TARGETS {
            let _ = cookies::read(&h, t);
        }
    }

    #[test]
    fn cookie_read_returns_only_the_exact_name_sent_once((target, pairs, splits) in cookie_header_case()) {
        // Spread the pairs over one or more Cookie headers.
        let mut cuts: Vec<usize> = splits.iter().map(|i| i.index(pairs.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut values = Vec::new();
        let mut prev = 0;
        for c in cuts.into_iter().chain([pairs.len()]) {
            let chunk: Vec<String> = pairs[prev..c].iter().map(|(n, v)| format!("{n}={v}")).collect();
            if !chunk.is_empty() {
                values.push(chunk.join("; "));
            }
            prev = c;
        }
        // Reference reading: `;`-separated `name=value` pairs, names trimmed, compared
        // exactly. A header that is not visible ASCII is skipped whole (`to_str` fails).
        let exact: Vec<&str> = values
            .iter()
            .filter(|h| h.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)))
            .flat_map(|h| h.split(';'))
            .filter_map(|p| p.split_once('='))
            .filter(|(n, _)| n.trim() == target)
            .map(|(_, v)| v.trim())
            .collect();
        let want = match exact.as_slice() {
            [only] => Some((*only).to_owned()),
            _ => None,
        };
        prop_assert_eq!(cookies::read(&headers(&values), target), want);
    }
}

// Bugs the properties above found, each fixed and kept as a plain test.

// BUG: `cookies::read` percent-decodes cookie *names* (cookie's `split_parse_encoded`), so a
// cookie whose raw name is `__Host%2Dmcp-flow` is read as `__Host-mcp-flow`. Browsers apply
// the `__Host-` prefix rules to the raw name only, so any sibling subdomain (or a plain-http
// response on the same host) can set such a cookie: the `__Host-` guarantee the module
// promises is lost (cookie tossing / session or flow-cookie fixation, and a way to make the
// real cookie "ambiguous" and ignored). Found by cookie_read_returns_only_the_exact_name_sent_once
// with percent-encoded names in its generator.
#[test]
fn bug_cookie_read_decodes_percent_encoded_names() {
    let mut h = HeaderMap::new();
    h.insert(
        COOKIE,
        HeaderValue::from_static("__Host%2Dmcp-flow=attacker"),
    );
    assert_eq!(cookies::read(&h, cookies::FLOW_COOKIE), None);
    let mut h = HeaderMap::new();
    h.insert(
        COOKIE,
        HeaderValue::from_static("__Host-mcp-session=victim; __Host%2Dmcp-session=attacker"),
    );
    assert_eq!(
        cookies::read(&h, cookies::SESSION_COOKIE).as_deref(),
        Some("victim")
    );
}
