//! The Prometheus exposition on the admin listener: it parses strictly as OpenMetrics text,
//! and its counters move when a flow runs.

use std::collections::{BTreeMap, HashMap};

use crate::support::admin::{Admin, proxy_with_admin};
use crate::support::mcp::Mcp;
use crate::support::{Browser, Client, http};
use serde_json::json;

/// One sample: metric name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses `k="v",k2="v2"` (with `\\`, `\"`, `\n` escapes); panics on anything else.
fn parse_labels(s: &str, line: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .unwrap_or_else(|| panic!("label without '=': {line}"));
        let key = &rest[..eq];
        assert!(valid_name(key), "bad label name {key:?}: {line}");
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .unwrap_or_else(|| panic!("label value not quoted: {line}"));
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => panic!("bad escape {other:?}: {line}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label value: {line}"),
            }
        };
        assert!(
            out.insert(key.to_owned(), value).is_none(),
            "duplicate label {key}: {line}"
        );
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else {
            assert!(rest.is_empty(), "junk after label: {line}");
        }
    }
    out
}

/// Parses the whole exposition strictly: every line is metadata or a sample of a declared
/// family with a suffix its type allows, the text ends with `# EOF`, and every histogram's
/// buckets are cumulative with `+Inf` equal to `_count`.
fn parse(text: &str) -> Vec<Sample> {
    assert!(text.ends_with("# EOF\n"), "exposition must end with # EOF");
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if line == "# EOF" {
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let kind = parts.next().unwrap();
            let name = parts
                .next()
                .unwrap_or_else(|| panic!("bare comment: {line}"));
            assert!(valid_name(name), "bad family name: {line}");
            match kind {
                "TYPE" => {
                    let t = parts.next().unwrap_or_default();
                    assert!(
                        [
                            "counter",
                            "gauge",
                            "histogram",
                            "summary",
                            "unknown",
                            "info",
                            "stateset",
                            "gaugehistogram"
                        ]
                        .contains(&t),
                        "bad type: {line}"
                    );
                    assert!(
                        types.insert(name.to_owned(), t.to_owned()).is_none(),
                        "family declared twice: {line}"
                    );
                }
                "HELP" | "UNIT" => {}
                _ => panic!("unknown metadata line: {line}"),
            }
            continue;
        }
        assert!(!line.is_empty(), "empty line in exposition");
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("sample without value: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad sample value: {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (
                n,
                parse_labels(
                    l.strip_suffix('}')
                        .unwrap_or_else(|| panic!("unclosed labels: {line}")),
                    line,
                ),
            ),
            None => (series, BTreeMap::new()),
        };
        assert!(valid_name(name), "bad metric name: {line}");
        let family_ok = types.iter().any(|(fam, t)| {
            let suffixes: &[&str] = match t.as_str() {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_count", "_sum", "_created"],
                _ => &[""],
            };
            suffixes.iter().any(|s| name == format!("{fam}{s}"))
        });
        assert!(family_ok, "sample of an undeclared family: {line}");
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    // Histograms: cumulative buckets, +Inf == count.
    for (fam, t) in &types {
        if t != "histogram" {
            continue;
        }
        let mut series: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
        for s in samples.iter().filter(|s| s.name == format!("{fam}_bucket")) {
            let mut key = s.labels.clone();
            let le = key.remove("le").expect("bucket without le");
            let le: f64 = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            series.entry(key).or_default().push((le, s.value));
        }
        for (key, buckets) in series {
            assert!(
                buckets
                    .windows(2)
                    .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                "{fam}: buckets not cumulative"
            );
            let inf = buckets.last().unwrap();
            assert!(inf.0.is_infinite(), "{fam}: no +Inf bucket");
            let count = samples
                .iter()
                .find(|s| s.name == format!("{fam}_count") && s.labels == key)
                .expect("histogram without _count");
            assert_eq!(inf.1, count.value, "{fam}: +Inf bucket != count");
        }
    }
    samples
}

/// The value of one series (0 if absent: counters with labels appear on first use).
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

async fn scrape(admin: &Admin) -> Vec<Sample> {
    parse(&admin.metrics().await)
}

#[tokio::test]
async fn exposition_parses_and_counters_move_through_a_full_flow() {
    let (proxy, admin) = proxy_with_admin().await;
    let r = http().get(admin.url("/metrics")).send().await.unwrap();
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let before = scrape(&admin).await;
    assert_eq!(value(&before, "mcp_proxy_registrations_total", &[]), 0.0);
    assert_eq!(value(&before, "mcp_proxy_tokens_issued_total", &[]), 0.0);

    // register → authorize → consent → GitHub → callback → token → refresh → /mcp.
    let client = Client::register(&proxy, "Metrics Helper", "https://app.example/cb").await;
    let t = client.tokens(&proxy, &Browser::new(), "alice").await;
    let refresh = t.json["refresh_token"].as_str().unwrap();
    let r = client.refresh(&proxy, refresh, &[]).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let mut mcp = Mcp::with_token(&proxy, r.json["access_token"].as_str().unwrap());
    mcp.version = "2026-07-28"; // stateless: a ping needs no session
    let (status, _) = mcp
        .request(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_eq!(status, 200);
    let (status, _) = Mcp::with_token(&proxy, "mcpat_not-a-real-token")
        .request(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_eq!(status, 401);
    // A connect link path: the code must not become a label value.
    let r = http()
        .get(proxy.url("/connect/secret-looking-code-123"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let text = admin.metrics().await;
    let after = parse(&text);
    let v = |name: &str, labels: &[(&str, &str)]| value(&after, name, labels);
    assert_eq!(v("mcp_proxy_registrations_total", &[]), 1.0);
    assert_eq!(
        v("mcp_proxy_consents_total", &[("decision", "approved")]),
        1.0
    );
    assert_eq!(v("mcp_proxy_codes_issued_total", &[]), 1.0);
    assert_eq!(v("mcp_proxy_tokens_issued_total", &[]), 1.0);
    assert_eq!(v("mcp_proxy_refreshes_total", &[]), 1.0);
    assert_eq!(
        v(
            "mcp_proxy_rejections_total",
            &[("source", "mcp_token"), ("reason", "unknown")]
        ),
        1.0
    );
    assert_eq!(
        v(
            "mcp_proxy_audit_events_total",
            &[("kind", "client_registered")]
        ),
        1.0
    );
    assert_eq!(
        v(
            "mcp_proxy_http_requests_total",
            &[
                ("endpoint", "/register"),
                ("method", "POST"),
                ("status", "201")
            ]
        ),
        1.0
    );
    assert_eq!(
        v(
            "mcp_proxy_http_requests_total",
            &[
                ("endpoint", "/token"),
                ("method", "POST"),
                ("status", "200")
            ]
        ),
        2.0
    );
    assert_eq!(
        v(
            "mcp_proxy_http_requests_total",
            &[("endpoint", "/mcp"), ("status", "401")]
        ),
        1.0
    );
    assert_eq!(
        v(
            "mcp_proxy_http_requests_total",
            &[("endpoint", "/connect/{code}"), ("method", "GET")]
        ),
        1.0
    );
    assert!(!text.contains("secret-looking-code-123"));
    assert!(!text.contains("mcpat_"));
    assert!(
        v(
            "mcp_proxy_http_request_duration_seconds_count",
            &[("endpoint", "/token")]
        ) >= 2.0
    );
    assert!(
        v(
            "mcp_proxy_store_operation_duration_seconds_count",
            &[("op", "put")]
        ) > 0.0
    );
}

#[test]
fn the_strict_parser_rejects_malformed_expositions() {
    for bad in [
        "# TYPE a counter\na_total 1\n",             // no # EOF
        "a_total 1\n# EOF\n",                        // undeclared family
        "# TYPE a counter\na_total{x=1} 1\n# EOF\n", // unquoted label
        "# TYPE a counter\na_total one\n# EOF\n",    // bad value
        "# TYPE a counter\na_bucket 1\n# EOF\n",     // wrong suffix for type
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n# EOF\n",
    ] {
        assert!(
            std::panic::catch_unwind(|| parse(bad)).is_err(),
            "accepted: {bad:?}"
        );
    }
    let ok = parse("# HELP a A.\n# TYPE a counter\na_total{x=\"q\\\"\"} 3\n# EOF\n");
    assert_eq!(ok[0].labels["x"], "q\"");
}
