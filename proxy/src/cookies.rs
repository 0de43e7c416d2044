//! Cookie policy in one place: every cookie the proxy sets is `__Host-` prefixed, `Secure`,
//! `HttpOnly`, `SameSite=Lax`, `Path=/`, without `Domain` (Lax, not Strict, because the
//! browser must carry it on the top-level navigation back from GitHub). Reading accepts only
//! the exact name, and a name that appears twice is treated as absent.

use http::HeaderMap;

/// The browser-bound flow cookie (see `bindings::consent_cookie`).
pub const FLOW_COOKIE: &str = "__Host-mcp-flow";
/// The proxy's sign-in session cookie.
pub const SESSION_COOKIE: &str = "__Host-mcp-session";
/// Binds consent forms to the browser that loaded them (CSRF; not the upstream state).
pub const CSRF_COOKIE: &str = "__Host-mcp-csrf";

/// A `Set-Cookie` value with the fixed attributes.
pub fn set(name: &str, value: &str, max_age_secs: u64) -> String {
    cookie::Cookie::build((name, value))
        .path("/")
        .secure(true)
        .http_only(true)
        .same_site(cookie::SameSite::Lax)
        .max_age(cookie::time::Duration::seconds(
            i64::try_from(max_age_secs).unwrap_or(i64::MAX),
        ))
        .build()
        .encoded()
        .to_string()
}

/// A `Set-Cookie` value that deletes the cookie.
pub fn clear(name: &str) -> String {
    set(name, "", 0)
}

/// The value of the cookie called exactly `name`, if sent once.
pub fn read(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut found: Option<String> = None;
    for h in headers.get_all(http::header::COOKIE) {
        let Ok(s) = h.to_str() else { continue };
        // Raw names, never percent-decoded: browsers apply the `__Host-` rules to the raw name,
        // so `__Host%2Dmcp-session` must not read as ours.
        for c in cookie::Cookie::split_parse(s).flatten() {
            if c.name() == name {
                if found.is_some() {
                    return None;
                }
                found = Some(c.value().to_owned());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_cookie_attributes_exact() {
        let c = set(FLOW_COOKIE, "v", 600);
        assert!(c.starts_with("__Host-mcp-flow=v"), "{c}");
        for attr in [
            "Path=/",
            "Secure",
            "HttpOnly",
            "SameSite=Lax",
            "Max-Age=600",
        ] {
            assert!(c.split("; ").any(|a| a == attr), "{attr} missing in {c}");
        }
        assert!(!c.to_ascii_lowercase().contains("domain"), "{c}");
    }

    #[test]
    fn unprefixed_cookie_ignored() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::COOKIE,
            "mcp-flow=x; __host-mcp-flow=y".parse().unwrap(),
        );
        assert_eq!(read(&h, FLOW_COOKIE), None);
    }

    #[test]
    fn duplicated_cookie_is_ambiguous_and_ignored() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::COOKIE,
            "__Host-mcp-flow=a; __Host-mcp-flow=b".parse().unwrap(),
        );
        assert_eq!(read(&h, FLOW_COOKIE), None);
        h.insert(
            http::header::COOKIE,
            "other=1; __Host-mcp-flow=a".parse().unwrap(),
        );
        assert_eq!(read(&h, FLOW_COOKIE).as_deref(), Some("a"));
    }
}
