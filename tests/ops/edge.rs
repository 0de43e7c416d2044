//! The layers every request passes (`http::router`'s edge service): each answer carries the
//! response headers that stop framing (clickjacking), content sniffing and referrer leaks,
//! and a request id, whatever route answered it — or none.

use crate::support::{TestProxy, http};

/// A route that forgot a layer would answer without them: every kind of answer is checked,
/// matched or not, successful or refused, HTML or JSON.
#[tokio::test]
async fn framing_and_sniffing_are_refused_on_every_answer_matched_or_not() {
    let proxy = TestProxy::start().await;
    let answers = [
        (
            "GET /healthz",
            http().get(proxy.url("/healthz")).send().await.unwrap(),
            200,
        ),
        (
            "GET unknown path",
            http().get(proxy.url("/no-such-page")).send().await.unwrap(),
            404,
        ),
        (
            "POST /mcp without a token",
            http()
                .post(proxy.url("/mcp"))
                .body("{}")
                .send()
                .await
                .unwrap(),
            401,
        ),
        (
            "POST /token without client authentication",
            http()
                .post(proxy.url("/token"))
                .form(&[("x", "y")])
                .send()
                .await
                .unwrap(),
            401,
        ),
        (
            "GET /authorize without parameters",
            http().get(proxy.url("/authorize")).send().await.unwrap(),
            400,
        ),
    ];
    for (what, r, status) in answers {
        assert_eq!(r.status(), status, "{what}");
        let h = r.headers();
        assert_eq!(h["x-frame-options"], "DENY", "{what}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{what}");
        assert_eq!(h["referrer-policy"], "same-origin", "{what}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{what}: {csp}");
        assert!(!h["x-request-id"].is_empty(), "{what}");
    }
}
